"""Sessions and call graphs from keyed hashes: the parent found by prompt and answer, the
hard cases each with one outcome, memory bounded, and no text in anything kept."""

from __future__ import annotations

import gc
import itertools
import json
import re
import time
import tracemalloc

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from latency_proxy.measure import conversation
from latency_proxy.measure.conversation import (
    BLOCK_CHARS,
    AnswerDigest,
    block_hashes,
    prompt_shape,
)
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from latency_proxy.record.exchange import Exchange
from latency_proxy.record.model_call import ModelCall
from latency_proxy.record.outcome import Outcome
from latency_proxy.record.span import RequestSpan
from latency_proxy.telemetry import sessions
from latency_proxy.telemetry.sessions import SessionTable

KEY = b"k" * 32
CANARY = "canary-5d1e"
SYSTEM = {"role": "system", "content": f"{CANARY} you run tools"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def span(trace_id: int | None = None) -> RequestSpan:
    caller = None
    if trace_id is not None:
        caller = SpanContext(trace_id, 7, is_remote=True, trace_flags=TraceFlags(1))
    own = SpanContext(trace_id or 99, 8, is_remote=False)
    return RequestSpan("POST", SpanKind.SERVER, own, caller, 0, {}, True)


def finished(
    table: SessionTable,
    request_id: str,
    messages: list[dict],
    answer: str | None,
    t0: float,
    t_end: float,
    header: bytes | None = None,
    trace_id: int | None = None,
    outcome: Outcome = Outcome.OK,
):
    """A chat call as the recorder hands it over: its body, and the answer as it streamed."""
    body = orjson.dumps({"model": "m", "messages": messages})
    exchange = Exchange(request_id, "POST", "/v1/chat/completions", t0, 0, span(trace_id))
    exchange.call = ModelCall("chat", body)
    exchange.status = 200
    exchange.outcome = outcome
    exchange.session_header = header
    if answer is not None:
        exchange.answer = AnswerDigest(KEY)
        for piece in answer.split(" "):  # streamed in deltas
            exchange.answer.text(piece + " ")
    placement = table.place(exchange, t_end)
    assert placement is not None
    return placement


def then(messages: list[dict], answer: str, *more: dict) -> list[dict]:
    return [*messages, {"role": "assistant", "content": answer.replace(" ", " ") + " "}, *more]


def words(answer: str) -> str:
    """The text a client reassembles from the deltas `finished` streams."""
    return "".join(piece + " " for piece in answer.split(" "))


def tool(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "call_1", "content": f"{CANARY} {text}"}


def test_a_call_that_repeats_a_prompt_and_its_answer_continues_it() -> None:
    table = SessionTable(KEY, 100, 600.0)
    first = [SYSTEM, {"role": "user", "content": f"{CANARY} fix it"}]
    root = finished(table, "r1", first, "read the gauge", 0.0, 1.0)
    assert (root.parent, root.turn, root.joined_by) == (None, 1, "new")
    second = [*first, {"role": "assistant", "content": words("read the gauge")}, tool("12 bar")]
    child = finished(table, "r2", second, "close the valve", 1.25, 2.0)
    assert (child.parent, child.turn, child.session) == ("r1", 2, root.session)
    assert child.joined_by == "parent"
    assert child.parent_gap_s == pytest.approx(0.25)
    assert child.tools_answered == 1
    assert child.prefix_blocks[: len(root.prefix_blocks) - 1] == root.prefix_blocks[:-1]
    # a different answer sent back is not the one relayed: no parent, a session of its own
    edited = [*first, {"role": "assistant", "content": "something else"}, tool("12 bar")]
    other = finished(table, "r3", edited, "x", 1.5, 2.0)
    assert (other.parent, other.joined_by) == (None, "new")
    assert CANARY not in repr((root, child, other, table._answers, table._sessions))


def test_fan_out_siblings_share_a_parent_and_a_header_joins_a_sub_agent() -> None:
    table = SessionTable(KEY, 100, 600.0)
    first = [SYSTEM, {"role": "user", "content": "plan"}]
    root = finished(table, "p", first, "three parts", 0.0, 1.0, header=b"run-9")
    kids = [
        finished(
            table, f"k{j}", [*then(first, "three parts"), {"role": "user", "content": f"part {j}"}],
            "done", 1.1, 2.0, header=b"run-9",
        )
        for j in range(3)
    ]  # fmt: skip
    assert {k.parent for k in kids} == {"p"} and {k.turn for k in kids} == {2}
    sub = finished(table, "s", [{"role": "user", "content": "look up"}], "ok", 2.1, 3.0, b"run-9")
    assert (sub.session, sub.parent, sub.joined_by) == (root.session, None, "header")


def test_the_same_text_in_many_sessions_goes_to_the_named_one_else_the_latest() -> None:
    table = SessionTable(KEY, 100, 600.0)
    first = [SYSTEM, {"role": "user", "content": "same question"}]
    a = finished(table, "a", first, "same answer", 0.0, 1.0, header=b"A")
    b = finished(table, "b", first, "same answer", 0.0, 1.1, header=b"B")
    assert a.session != b.session
    follow = then(first, "same answer", {"role": "user", "content": "more"})
    assert finished(table, "a2", follow, "x", 2.0, 3.0, header=b"A").parent == "a"
    assert finished(table, "b2", follow, "x", 2.0, 3.0, header=b"B").parent == "b"
    assert finished(table, "n2", follow, "x", 2.0, 3.0).parent == "b"  # unnamed: the latest


def test_a_parent_that_never_answered_is_no_parent() -> None:
    table = SessionTable(KEY, 100, 600.0)
    first = [SYSTEM, {"role": "user", "content": "go"}]
    finished(table, "f", first, "half an ans", 0.0, 1.0, outcome=Outcome.UPSTREAM_ERROR)
    child = finished(table, "c", then(first, "half an ans"), "x", 2.0, 3.0)
    assert (child.parent, child.joined_by, child.turn) == (None, "new", 1)


def test_a_lying_traceparent_joins_a_session_but_never_makes_a_parent() -> None:
    table = SessionTable(KEY, 100, 600.0)
    first = [SYSTEM, {"role": "user", "content": "go"}]
    root = finished(table, "r", first, "ok", 0.0, 1.0, trace_id=0xABC)
    liar = finished(table, "l", [{"role": "user", "content": "unrelated"}], "x", 1.0, 2.0,
                    trace_id=0xABC)  # fmt: skip
    assert (liar.session, liar.parent, liar.joined_by) == (root.session, None, "trace")
    # content wins over a trace id that names another session
    child = finished(table, "c", then(first, "ok"), "y", 2.0, 3.0, trace_id=0xDEF)
    assert (child.session, child.parent) == (root.session, "r")


def test_open_sessions_are_bounded_and_every_expiry_is_counted() -> None:
    clock, expired = Clock(), []
    table = SessionTable(KEY, 1_000, 60.0, expired.append, clock)
    tracemalloc.start()
    for n in range(100_000):  # 10^5 sessions, each one call
        finished(table, f"r{n}", [{"role": "user", "content": f"q{n}"}], "a", 0.0, 1.0)
    gc.collect()  # what the table keeps, not what the collector has yet to free
    # allocated by the table's own code and still held (not, say, log records a handler keeps)
    own = [tracemalloc.Filter(True, m.__file__) for m in (sessions, conversation)]
    held = tracemalloc.take_snapshot().filter_traces(own)
    kept = sum(stat.size for stat in held.statistics("filename"))
    tracemalloc.stop()
    assert table.open == 1_000 and table.answers == 1_000
    assert expired.count("capacity") == 99_000
    # bounded by the cap, not the traffic: 10^5 sessions kept would hold tens of MB
    assert kept < 8 * 2**20
    clock.now += 61
    finished(table, "late", [{"role": "user", "content": "late"}], "a", 0.0, 1.0)
    assert table.open == 1 and expired.count("idle") == 1_000
    # a session's answers are bounded too: a call may continue only its latest 64
    for n in range(200):
        finished(table, f"x{n}", [{"role": "user", "content": f"x{n}"}], "a", 0, 1, b"one")
    assert table.answers <= 64 + 1


def test_a_streamed_answer_hashes_as_the_message_sent_back() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Le café"}}]},
        {"choices": [{"index": 0, "delta": {"content": " est \"chaud\"\n"}}]},
        *({"choices": [{"index": 0, "delta": {"content": w}}]} for w in (" et", " bon", ".")),
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "chatcmpl-tool-1", "type": "function",
             "function": {"name": "read", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"a\": 1}"}}]}}]},
    ]  # fmt: skip
    for lazy in (True, False):
        streamed = AnswerDigest(KEY)
        meter = StreamMeter(0.0, lazy=lazy, answer=streamed)
        for i, chunk in enumerate(chunks):
            for event in SSEParser().feed(b"data: " + json.dumps(chunk).encode() + b"\n\n"):
                meter.on_event(i * 0.01, event)
        sent_back = {
            "role": "assistant",
            "content": 'Le café est "chaud"\n et bon.',
            "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
                            "function": {"name": "read", "arguments": "{\"a\": 1}"}}],
        }  # fmt: skip
        shape = prompt_shape({"messages": [SYSTEM, sent_back, tool("r")]}, KEY)
        assert shape is not None and shape.continues is not None
        assert shape.continues[1] == streamed.digest()
        assert streamed.tool_ids == ["chatcmpl-tool-1"]


@given(st.text(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_an_answer_hashes_alike_however_it_is_cut(text: str, cuts: list[int]) -> None:
    whole, pieces = AnswerDigest(KEY), AnswerDigest(KEY)
    whole.text(text)
    edges = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    for start, end in itertools.pairwise(edges):
        pieces.text(text[start:end])
    assert whole.digest() == pieces.digest()


def test_block_hashes_share_exactly_the_common_whole_blocks_and_are_keyed() -> None:
    base = "x" * (BLOCK_CHARS * 2 + 10)
    grown = base + "y" * BLOCK_CHARS
    a, b = block_hashes(base, KEY), block_hashes(grown, KEY)
    assert len(a) == 3 and len(b) == 4
    assert a[:2] == b[:2] and a[2] != b[2]  # the partial block grew: it differs
    assert block_hashes(base, b"other" * 8)[0] != a[0]
    assert block_hashes("y" + base[1:], KEY)[1] != a[1]  # chained: a change carries on


def test_expired_sessions_are_counted_on_metrics_from_zero(start_proxy, upstream) -> None:
    """Both reasons are series from the start (a panel of rates shows 0, not no data), and
    every session dropped past --max-sessions or idle past --session-idle counts."""
    proxy = start_proxy("--upstream", upstream.url, "--max-sessions", "2", "--session-idle", "1s")
    series = r'^latency_proxy_sessions_expired_total\{reason="(\w+)"\} (\S+)$'

    def expired() -> dict[str, float]:
        return {k: float(v) for k, v in re.findall(series, proxy.metrics(), re.M)}

    def call(session: str) -> None:
        body = {"model": "scripted", "messages": [{"role": "user", "content": session}]}
        sent = httpx.post(proxy.url + "/v1/chat/completions", json=body,
                          headers={"x-session-id": session}, timeout=10)  # fmt: skip
        assert sent.status_code == 200

    assert expired() == {"idle": 0.0, "capacity": 0.0}
    for session in ("a", "b", "c", "d"):
        call(session)
    deadline = time.monotonic() + 10
    while expired()["capacity"] < 2:  # the records are written as the answers end
        assert time.monotonic() < deadline, expired()
        time.sleep(0.05)
    time.sleep(1.2)
    call("e")  # c and d idle past 1 s
    while expired() != {"idle": 2.0, "capacity": 2.0}:
        assert time.monotonic() < deadline, expired()
        time.sleep(0.05)
