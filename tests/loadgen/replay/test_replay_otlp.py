"""GenAI spans written by the OpenTelemetry SDK (OTLP JSON) as a replay source: each model
call with its session and the call it waited for, replayed in that order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind

from loadgen.commands.cli import main
from loadgen.replay import otlp, sessions
from loadgen.replay.formats import BadRow, parse
from loadgen.replay.window import schedule
from loadgen.runs import rundir
from loadgen.stack.processes import simulator

S = 10**9  # nanoseconds


def agent_spans() -> str:
    """An agent's session written by the SDK: a call, a tool, a call, a fan-out of two, a
    follow-up; another trace's lone call; a span that is no model call."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")

    def call(start: float, end: float, conversation: str | None, *links: Link) -> object:
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                      "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 4}  # fmt: skip
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        span = tracer.start_span(
            "chat m", kind=SpanKind.CLIENT, attributes=attributes,
            start_time=int(start * S), links=list(links),
        )  # fmt: skip
        span.end(int(end * S))
        return span

    first = call(100.0, 101.0, "s1")
    second = call(101.5, 102.5, "s1")  # after a 0.5 s tool
    call(103.0, 104.0, "s1")  # a fan-out of two
    call(103.0, 104.2, "s1")
    call(110.0, 111.0, "s1", Link(second.get_span_context()))  # says whom it continues
    call(100.2, 100.8, None)  # another trace, no conversation id
    tracer.start_span("tool read", start_time=int(101.1 * S)).end(int(101.4 * S))
    del first
    request = encode_spans(exporter.get_finished_spans())
    return MessageToJson(request, indent=None) + "\n"


def test_an_agents_spans_become_calls_waiting_for_their_parents() -> None:
    parsed = parse(agent_spans())
    assert parsed.format == "otlp" and len(parsed.records) == 6
    tree = sessions.graph(schedule(parsed.records))
    by_start = sorted(parsed.records, key=lambda r: r.at)
    ids = {r.call: n for n, r in enumerate(by_start)}
    parent = {ids[r.call]: ids.get(r.parent) for r in parsed.records}
    assert parent == {0: None, 1: None, 2: 0, 3: 2, 4: 2, 5: 2}  # 5: by its link
    gap = {ids[r.call]: r.gap_s for r in parsed.records}
    assert gap[2] == gap[3] == pytest.approx(0.5) and gap[5] == pytest.approx(7.5)
    assert tree.meta() == {"sessions": 2, "linked": 4, "unlinked": 0}


def test_a_span_that_cannot_be_read_is_a_bad_row_naming_its_line() -> None:
    good = agent_spans()
    bad = json.loads(good)
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "not an id!"
    with pytest.raises(BadRow, match="line 2: an id is neither hex nor base64"):
        parse(good + json.dumps(bad) + "\n", "otlp")
    assert len(parse(good + json.dumps(bad) + "\n", "otlp", skip_bad=True).bad) == 1


def test_an_otlp_capture_replays_in_its_dependency_order(tmp_path: Path) -> None:
    trace = tmp_path / "spans.json"
    trace.write_text(agent_spans())
    with simulator("--preset", "llama-70b-bf16-tp4-a100", "--served-model-name", "m") as sim:
        argv = ["--target", sim, "--replay", str(trace), "--out", str(tmp_path / "r")]
        assert main([*argv, "--no-progress", "--replay-speed", "4"]) == 0
    run = rundir.read(tmp_path / "r")
    records = {r.replay_index: r for r in run.records}
    parsed = {n: r for n, r in enumerate(parse(trace.read_text()).records)}
    lines = {r.call: r.line for r in parsed.values()}
    assert len(records) == 6 and all(r.ok for r in records.values())
    for trace_record in parsed.values():
        if trace_record.parent is not None:
            mine, theirs = records[trace_record.line], records[lines[trace_record.parent]]
            assert mine.sent_at >= theirs.end_at + (trace_record.gap_s or 0) - 0.02


def test_an_otlp_capture_keeps_its_order_on_the_twin(tmp_path: Path) -> None:
    """On `virtual:`, a call arrives its gap after its parent's end on the virtual clock,
    and finds its parent's prompt and answer cached: spans carry no prefix hashes, the
    dependencies alone make the shared prefix."""
    trace = tmp_path / "spans.json"
    trace.write_text(agent_spans())
    argv = ["--target", "virtual:llama-70b-bf16-tp4-a100", "--replay", str(trace)]
    assert main([*argv, "--out", str(tmp_path / "r"), "--no-progress", "--warmup", "0s"]) == 0
    records = {r.replay_index: r for r in rundir.read(tmp_path / "r").records}
    parsed = parse(trace.read_text()).records
    lines = {r.call: r.line for r in parsed}
    assert len(records) == 6 and all(r.ok for r in records.values())
    linked = [r for r in parsed if r.parent is not None]
    assert len(linked) == 4
    for trace_record in linked:
        mine, theirs = records[trace_record.line], records[lines[trace_record.parent]]
        assert mine.sent_at == pytest.approx(theirs.end_at + (trace_record.gap_s or 0), abs=1e-6)
        assert mine.session == trace_record.session and (mine.cached_tokens or 0) >= 16
    roots = [records[r.line] for r in parsed if r.parent is None]
    assert all(r.cached_tokens == 0 for r in roots)


def _parents_by_definition(calls: list[otlp.Call]) -> dict[str, tuple[str, float]]:
    """The rule read literally: the call a link names, else the latest-ending call of the
    session that had ended when this one started (ties: the earliest started)."""
    ordered = sorted(calls, key=lambda c: (c.start_s, c.line))
    by_id = {c.span_id: c for c in ordered}
    out = {}
    for i, call in enumerate(ordered):
        linked = next((by_id[s] for s in call.links if s in by_id and s != call.span_id), None)
        if linked is None:
            mine = [c for c in ordered[:i] if c.session == call.session]
            ended = [c for c in mine if c.end_s <= call.start_s]
            linked = max(ended, key=lambda c: c.end_s) if ended else None
        if linked is not None and linked.start_s <= call.start_s:
            out[call.span_id] = (linked.span_id, max(0.0, call.start_s - linked.end_s))
    return out


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # session
            st.integers(0, 40),  # start, tenths of a second: ties are common
            st.integers(0, 20),  # duration
            st.lists(st.integers(0, 30), max_size=1),  # a link, by line
        ),
        max_size=30,
    )
)
def test_a_calls_parent_is_the_rules_whatever_the_order_and_ties(rows: list) -> None:
    calls = [
        otlp.Call(
            line, f"s{line}", f"x{session}", start / 10, (start + length) / 10, 1, 1, "m",
            tuple(f"s{link}" for link in links),
        )
        for line, (session, start, length, links) in enumerate(rows)
    ]  # fmt: skip
    assert otlp.parents(calls) == _parents_by_definition(calls)
