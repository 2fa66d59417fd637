"""Other tools' session traces replayed with their dependencies: AIPerf's multi_turn datasets
and its Mooncake lines with a session_id, and inference-perf's OTel trace files, read into
the same sessions as the proxy's capture, sent on the twin and against the simulator with
each later call no earlier than the answer it waits for plus its wait.

The fixtures (tests/loadgen/fixtures/aiperf/) are in the shapes AIPerf 0.13.0 defines: the
MultiTurn and SingleTurn models and the MooncakeTrace model (aiperf/dataset/loader/models.py;
the examples of multi_turn.py's and mooncake_trace.py's loader docstrings), and its custom
dataset guide (https://docs.nvidia.com/aiperf/tutorials/datasets-inputs/multi-turn-
conversations). Its scheduler sends a later turn `delay` ms after the turn before it returned
(aiperf/timing/strategies/fixed_schedule.py and request_rate.py, handle_credit_return), and
keeps the conversation, live answers included (DELTAS_WITHOUT_RESPONSES, its default).

The inference-perf fixtures (tests/loadgen/fixtures/inference-perf/) are in the trace file
shape its docs/otel_trace_replay.md ("Trace File Format") and its
inference_perf/datagen/replay/otel_trace_to_replay_graph.py (build_raw_calls) define. Their
calls, predecessors, waits and token counts below are the ones inference-perf 0.7.0's own
graph builder (build_graph) gives for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.records import Record, RunData
from loadgen.commands.cli import main
from loadgen.inputs.bounds import MAX_TOKENS
from loadgen.replay.formats import BadRow, TraceRecord, parse
from loadgen.runs import rundir
from loadgen.stack.processes import simulator

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aiperf"
MULTI_TURN = FIXTURES / "multi-turn.jsonl"
MOONCAKE = FIXTURES / "mooncake-sessions.jsonl"
AGENT = FIXTURES.parent / "inference-perf" / "agent-trace.json"
CHAINS = FIXTURES.parent / "inference-perf" / "sessions.jsonl"
PRESET = "llama-70b-bf16-tp4-a100"
EPOCH = 1e-6  # the twin's clock: exact but for float rounding
EARLY = 0.002  # a live timer may fire this much before it is due
# each later call's wait after the answer before it, as the fixtures write it: an AIPerf
# turn's delay (ms there), or the time between timestamps (multi-turn.jsonl's batch-3: 2200
# - 1000); an inference-perf call's wait_ms after its last predecessor ended
WAITS = {
    MULTI_TURN: {2: 0.8, 3: 1.5, 5: 0.4, 7: 1.2, 8: 0.5},
    MOONCAKE: {4: 0.7, 5: 0.3, 6: 0.25},
    AGENT: {2: 0.3, 3: 0.3, 4: 0.32, 5: 0.3},
    CHAINS: {2: 0.4, 3: 0.8, 5: 0.4},
}


def records(path: Path) -> dict[int, TraceRecord]:
    return {r.line: r for r in parse(path.read_text()).records}


def test_multi_turn_sessions_keep_their_turns_delays_and_conversation() -> None:
    got = records(MULTI_TURN)
    sessions = {r.line: (r.session, r.turn, r.parent, r.gap_s) for r in got.values()}
    assert sessions == {
        1: ("support-1", 1, None, None),  # the leading system turn is hoisted into turn 1
        2: ("support-1", 2, "1", 0.8),
        3: ("support-1", 3, "2", 1.5),
        4: ("support-2", 1, None, None),
        5: ("support-2", 2, "4", 0.4),
        6: ("batch-3", 1, None, None),
        7: ("batch-3", 2, "6", pytest.approx(1.2)),  # timestamps: the time between them
        8: ("support-1", 4, "3", 0.5),  # the session goes on on a later line
    }
    assert [got[n].at for n in (1, 4, 6)] == [0.0, 0.3, 1.0]  # no timestamp: with the first
    lines = [json.loads(x) for x in MULTI_TURN.read_text().splitlines()]
    system, first, second = lines[0]["turns"][:3]
    # a turn's prompt is the conversation: the turn before, its answer, its own text
    assert got[1].input_tokens == (len(system["text"]) + len(first["text"])) // 4
    assert got[2].input_tokens == got[1].input_tokens + 24 + len(second["text"]) // 4
    assert got[2].output_tokens == second["output_length"]
    # sessions that open with one system prompt share its blocks, and only those
    opening = len(system["text"]) // 1024
    assert opening >= 1
    assert got[1].prefix[:opening] == got[4].prefix[:opening]
    assert got[1].prefix[opening] != got[4].prefix[opening]


def test_mooncake_lines_with_a_session_id_are_its_turns() -> None:
    got = records(MOONCAKE)
    assert {r.line: (r.session, r.turn, r.parent, r.gap_s) for r in got.values()} == {
        1: ("abc-123", 1, None, None),
        2: (None, None, None, None),  # a line of no session: a request as before
        3: ("def-456", 1, None, None),
        4: ("abc-123", 2, "1", pytest.approx(0.7)),
        5: ("def-456", 2, "3", 0.3),
        6: ("abc-123", 3, "4", 0.25),
    }
    assert got[4].input_tokens == 300 + 40 + 150  # AIPerf's input_length is the turn's own
    assert got[1].prefix == ("1", "2")


def lines(*items: dict) -> str:
    return "".join(json.dumps(x) + "\n" for x in items)


TURN = {"text": "hello there", "output_length": 4}


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (lines({"turns": []}), 1, "turns must be a non-empty list"),
        (lines({"session_id": 7, "turns": [TURN]}), 1, "session_id must be a non-empty string"),
        (lines({"turns": [{"text": "hello there"}]}), 1, "turn 1: no output_length"),
        (lines({"turns": [TURN, {**TURN, "delay": -5}]}), 1, "turn 2: delay is negative"),
        (lines({"turns": [TURN, {**TURN, "delay": 9e7}]}), 1, "more than a day"),
        (lines({"turns": [TURN, {**TURN, "delay": "soon"}]}), 1, "delay is not a number"),
        (lines({"turns": [{**TURN, "timestamp": 5, "delay": 5}]}), 1, "not both"),
        (lines({"turns": [{**TURN, "output_length": 10**9}]}), 1, "from 1 to"),
        (lines({"turns": [{"text": ["secret words"], "output_length": 3}]}), 1, "text must be"),
        (  # a session's turns out of order: the later one names its line
            lines(
                {"session_id": "s", "turns": [{**TURN, "timestamp": 900}]},
                {"session_id": "s", "turns": [{**TURN, "timestamp": 400}]},
            ),
            2,
            "before its session's turn before it",
        ),
        (lines({"turns": [{"text": "x " * 2_500_000, "output_length": 1}]}), 1, "from 1 to"),
        (
            lines({"turns": [{"text": "x " * 1_100_000, "output_length": 1}] * 2}),
            1,
            f"turn 2: the conversation grows past {MAX_TOKENS} tokens",
        ),
    ],
)
def test_a_bad_turn_names_its_line(content: str, line: int, reason: str) -> None:
    with pytest.raises(BadRow) as caught:
        parse(content, "aiperf")
    assert caught.value.line == line and reason in caught.value.reason
    assert "secret" not in str(caught.value)  # a turn's text is never quoted


def test_mooncake_session_lines_out_of_order_or_bad_name_their_line() -> None:
    first = {"session_id": "s", "timestamp": 900, "input_length": 5, "output_length": 2}
    later = {**first, "timestamp": 400}
    with pytest.raises(BadRow, match="before its session's turn before it") as caught:
        parse(lines(first, later))
    assert caught.value.line == 2
    with pytest.raises(BadRow, match="delay is negative"):
        parse(lines(first, {**first, "timestamp": None, "delay": -1}))


def test_skipped_turns_leave_the_session_whole() -> None:
    """A bad turn skipped: the next turn waits for the last good one, nothing is lost."""
    content = lines({"session_id": "s", "turns": [TURN, {"text": "x"}, {**TURN, "delay": 100}]})
    parsed = parse(content, skip_bad=True)
    assert [b.reason for b in parsed.bad] == ["turn 2: no output_length: a replay sends each "
                                              "turn's own output length"]  # fmt: skip
    assert [(r.line, r.parent) for r in parsed.records] == [(1, None), (3, "1")]


def test_a_bad_file_exits_2_naming_file_and_line(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(lines({"turns": [TURN]}, {"turns": [{"text": "secret", "delay": "x"}]}))
    argv = ["--target", f"virtual:{PRESET}", "--replay", str(trace), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{trace}:2: turn 1:" in err and "secret" not in err
    assert not (tmp_path / "run").exists()


def test_inference_perf_calls_wait_for_their_last_predecessor() -> None:
    """A tool loop, a fan-out of two, and a call joining them: each waits for the
    predecessor that ended last, as inference-perf's graph says."""
    got = records(AGENT)  # 7 spans: one a tool's, one the first call exported twice
    assert {r.line: (r.turn, r.parent, r.input_tokens, r.output_tokens) for r in got.values()} == {
        1: (1, None, 220, 30),
        2: (2, "1", 320, 25),  # its tool messages answer the first call's tool calls
        3: (3, "2", 150, 40),  # the fan-out: both repeat the second call's answer
        4: (3, "2", 160, 35),
        5: (4, "4", 400, 60),  # joins both: waits for the one that ended last
    }
    assert {r.session for r in got.values()} == {"trace-agent-1"}
    assert {r.line: r.gap_s for r in got.values()} == {
        1: None, **{n: pytest.approx(w) for n, w in WAITS[AGENT].items()}
    }  # fmt: skip


def test_inference_perf_lines_are_sessions_sized_from_their_text() -> None:
    got = records(CHAINS)
    assert [(r.session, r.turn, r.parent) for r in got.values()] == [
        ("commute", 1, None),
        ("errands", 1, None),
        ("commute", 2, "1"),
        ("errands", 2, "4"),
        ("commute", 3, "2"),
    ]
    # no usage: four characters a token, per message (inference-perf's estimate_tokens)
    first = json.loads(CHAINS.read_text().splitlines()[0])["spans"][0]["attributes"]
    (question,) = json.loads(first["gen_ai.input.messages"])
    (answer,) = json.loads(first["gen_ai.output.messages"])
    assert got[1].input_tokens == len(question["content"]) // 4
    assert got[1].output_tokens == len(answer["content"]) // 4


def span(**attributes: object) -> dict:
    return {
        "span_id": "s1",
        "name": "chat m",
        "start_time": "2026-01-01T00:00:00Z",
        "end_time": "2026-01-01T00:00:01Z",
        "attributes": {
            "gen_ai.input.messages": [{"role": "user", "content": "secret words"}],
            "gen_ai.usage.output_tokens": 5,
            **attributes,
        },
    }


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{\n  "spans": [\n', "not JSON"),
        (json.dumps({"spans": {"a": 1}}), "spans must be a list"),
        (json.dumps({"spans": [{**span(), "start_time": "yesterday"}]}), "span 1: start_time"),
        (json.dumps({"spans": [span(**{"gen_ai.usage.output_tokens": -3})]}), "span 1: gen_ai"),
        (json.dumps({"spans": [span(**{"gen_ai.input.messages": "[{"})]}), "span 1: not a"),
        (json.dumps({"spans": [span(**{"gen_ai.input.messages": [3]})]}), "span 1: gen_ai"),
    ],
)
def test_a_bad_inference_perf_file_names_its_line(content: str, reason: str) -> None:
    with pytest.raises(BadRow) as caught:
        parse(content, "inference-perf")
    assert caught.value.line == 1 and reason in caught.value.reason
    assert "secret" not in str(caught.value)


def test_an_inference_perf_file_is_detected_pretty_printed_or_a_line_a_session() -> None:
    assert parse(AGENT.read_text()).format == "inference-perf"  # one object, many lines
    assert parse(CHAINS.read_text()).format == "inference-perf"  # one a line
    unsized = span(**{"gen_ai.usage.output_tokens": None})  # no usage, no output to size by
    assert parse(json.dumps({"spans": [unsized]})).unreplayable == 1


def replayed(
    path: Path, run: RunData, waits: dict[int, float]
) -> Iterator[tuple[float, Record, TraceRecord]]:
    """Each later call of the file, sent: when the answer before it ended on this run plus
    its wait in the file (`waits`, by record), its record, its call; every call sent once,
    answered, with its session and turn."""
    got = records(path)
    sent = {r.replay_index: r for r in run.records}
    assert sent.keys() == got.keys() and all(r.ok for r in sent.values())
    for call in got.values():
        mine = sent[call.line]
        assert (mine.session, mine.turn) == (call.session, call.turn)
        if call.parent is not None:
            yield sent[int(call.parent)].end_at + waits[call.line], mine, call
    assert sum(r.parent is not None for r in got.values()) == len(waits)


@pytest.mark.parametrize("path", list(WAITS), ids=lambda p: p.name)
def test_on_the_twin_each_later_call_goes_its_wait_after_the_answer(
    path: Path, tmp_path: Path
) -> None:
    argv = ["--target", f"virtual:{PRESET}", "--replay", str(path), "--no-progress"]
    assert main([*argv, "--warmup", "0s", "--out", str(tmp_path / "run")]) == 0
    run = rundir.read(tmp_path / "run")
    for due, mine, turn in replayed(path, run, WAITS[path]):
        assert mine.sent_at == pytest.approx(due, abs=EPOCH)
        assert mine.input_tokens == turn.input_tokens
    assert run.meta["replay"]["format"] == parse(path.read_text()).format


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--preset", PRESET, "--served-model-name", "sim") as url:  # the spans' model
        yield url


@pytest.mark.parametrize(
    ("path", "sessions"), [(MULTI_TURN, 3), (AGENT, 1)], ids=["aiperf", "inference-perf"]
)
def test_live_each_later_call_waits_for_the_answer_and_its_wait(
    sim: str, tmp_path: Path, path: Path, sessions: int
) -> None:
    argv = ["--target", sim, "--replay", str(path), "--no-progress", "--seed", "3"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    run = rundir.read(tmp_path / "run")
    for due, mine, call in replayed(path, run, WAITS[path]):
        assert due - EARLY <= mine.sent_at <= due + 0.25  # never before, and not long after
        assert mine.output_tokens == call.output_tokens
    linked = len(WAITS[path])
    assert run.meta["replay"]["calls"] == {"sessions": sessions, "linked": linked, "unlinked": 0}
