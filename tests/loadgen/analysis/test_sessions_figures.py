"""Per-session figures of a capture: the model's time is the union of its calls (fan-out
siblings overlap), the rest is the tools'; prefix hits only where the server said."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.analysis.records import Record
from loadgen.analysis.sessions import from_lines, per_session, sentence, ttft_by_turn, view
from loadgen.commands import sessions as sessions_command

CAPTURE = Path(__file__).parents[1] / "fixtures" / "agent-capture.jsonl"


def line(session: str, at: float, e2e: float, turn: int, **more: object) -> dict:
    return {"session": session, "arrived_at": at, "e2e_s": e2e, "turn": turn,
            "input_tokens": 100, "ttft_s": 0.1 * turn, **more}  # fmt: skip


def test_overlapping_calls_count_once_and_the_gaps_are_the_tools() -> None:
    lines = [
        line("a", 0.0, 1.0, 1, cached_tokens=0),
        line("a", 1.5, 1.0, 2, cached_tokens=80),  # 0.5 s of tool before it
        line("a", 3.0, 1.0, 3, cached_tokens=90),  # a fan-out of two, overlapping
        line("a", 3.5, 1.0, 3, cached_tokens=90),
        line("b", 0.0, 2.0, 1),
        {"session": None, "arrived_at": 0.0, "e2e_s": 9.0},  # no session: not counted
    ]
    a, b = per_session(from_lines(lines))
    assert (a.session, a.calls, a.turns) == ("a", 4, 3)
    assert a.span_s == pytest.approx(4.5) and a.model_s == pytest.approx(3.5)
    assert a.tools_s == pytest.approx(1.0) and a.model_share == pytest.approx(3.5 / 4.5)
    assert a.prefix_hit_share == pytest.approx(260 / 400)
    assert b.prefix_hit_share is None  # absent is not zero
    turns = ttft_by_turn(from_lines(lines))
    assert turns[3] == {"calls": 2, "p50_s": pytest.approx(0.3), "p90_s": pytest.approx(0.3)}
    assert turns[1]["calls"] == 2


def test_the_sessions_command_reads_the_capture_as_its_lines_say(capsys) -> None:
    """`loadgen sessions` on the agent capture: each session's calls, span and TTFT by turn
    as counted here from its lines; the trace ids stay in the capture."""
    lines = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
    assert sessions_command.main([str(CAPTURE), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    mine: dict[str, list[dict]] = defaultdict(list)
    for x in lines:
        mine[x["session"]].append(x)
    assert len(printed["sessions"]) == len(mine) == 3
    for s in printed["sessions"]:
        calls = mine[s["session"]]
        end = max(c["arrived_at"] + c["e2e_s"] for c in calls)
        assert s["calls"] == len(calls) and s["turns"] == max(c["turn"] for c in calls)
        assert s["span_s"] == pytest.approx(end - min(c["arrived_at"] for c in calls))
        assert "slowest_trace_id" not in s
    assert [s["span_s"] for s in printed["sessions"]] == sorted(
        (s["span_s"] for s in printed["sessions"]), reverse=True
    )
    first = [x["ttft_s"] for x in lines if x["turn"] == 1]
    assert printed["ttft_by_turn"]["1"]["calls"] == len(first) == 5
    assert printed["ttft_by_turn"]["1"]["p50_s"] == pytest.approx(statistics.median(first))


def record(session: str | None, at: float, e2e: float, turn: int, **more: object) -> Record:
    return Record(request_id=f"{session}-{at}", target="t", intended_at=at, sent_at=at,
                  end_at=at + e2e, send_lag_s=0.0, ok=True, session=session, turn=turn,
                  ttft_s=0.01 * turn, e2e_s=e2e, input_tokens=100, **more)  # fmt: skip


def test_a_runs_view_lists_the_first_turns_the_deepest_and_the_slowest_sessions() -> None:
    deep = [record("a", 2.0 * n, 1.0, n, trace_id=f"a{n}") for n in range(1, 13)]
    deep[6] = record("a", 14.0, 1.9, 7, trace_id="a7-slow")  # its longest call
    runs = [
        *deep,
        record("b", 0.0, 3.0, 1, cached_tokens=50, block=0),
        record("b", 0.0, 1.0, 1, cached_tokens=10, block=1),  # the same id, another block
        record("c", 0.0, 2.0, 1),
        record(None, 0.0, 9.0, 1),  # no session: not one of them
    ]
    block = view(runs)
    assert block is not None
    assert (block["sessions"], block["calls"]) == (4, 15)
    assert [t["turn"] for t in block["ttft_by_turn"]] == [*range(1, 11), 12]
    assert block["ttft_by_turn"][0]["calls"] == 4
    assert block["prefix_hit_share"] == pytest.approx(60 / 1500)
    a, b, c = block["slowest"]
    assert (a["session"], a["calls"], a["trace_id"]) == ("a", 12, "a7-slow")
    assert a["span_s"] == pytest.approx(23.0)
    assert a["model_share"] == pytest.approx((11 + 1.9) / 23.0)
    assert (b["session"], b["span_s"], c["session"]) == ("b", 3.0, "c")
    assert b["trace_id"] is None
    assert block["span_s"]["p50"] == pytest.approx(2.5)  # of 1, 2, 3 and 23 s
    assert view([record(None, 0.0, 1.0, 1)]) is None


def test_the_sentence_says_where_ttft_went_by_turn_where_calls_were_enough() -> None:
    talks = [record(s, 2.0 * n, 1.0, n) for s in "abcde" for n in range(1, 9)]
    talks.append(replace(record("f", 0.0, 1.0, 9), ttft_s=0.001))  # one call: no median
    block = view(talks)
    assert block is not None
    assert block["ttft_by_turn"][-1]["turn"] == 9
    assert sentence(block) == (
        "6 sessions, 6.8 calls each: the model had 53% of a session's time (median), tools "
        "and the client the rest; TTFT grows from 10 ms at turn 1 to 80 ms at turn 8 (P50 "
        "of turns with 5 calls or more)"
    )


def test_sessions_without_turns_say_nothing_of_turns() -> None:
    """An OTLP replay's records have sessions but no turns: no TTFT by turn to tell."""
    untold = [replace(record("a", n, 1.0, 1), turn=None) for n in range(3)]
    block = view(untold)
    assert block is not None and block["ttft_by_turn"] == []
    assert (block["sessions"], block["calls"], block["prefix_hit_share"]) == (1, 3, None)
    assert sentence(block) == (
        "1 session, 3.0 calls each: the model had 100% of a session's time (median), tools "
        "and the client the rest"
    )
