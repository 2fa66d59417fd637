"""The meter's server signals: answer TTFT and reasoning, cached tokens, the server's own
timings, stalls (docs/reference/timing.md). Lazy and full parsing must agree."""

from __future__ import annotations

import json

import pytest

from latency_proxy.measure.meter import ReasoningSource, RequestTiming, StreamMeter
from latency_proxy.measure.sse import Event

METRICS = {
    "time_to_first_token_ms": 18.96,
    "generation_time_ms": 25.88,
    "queue_time_ms": 0.05,
    "mean_itl_ms": 6.47,
    "tokens_per_second": 111.5,
}


def ev(payload: object) -> Event:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return Event(b"data: " + data + b"\n\n", data)


def delta(usage: int | None = None, **fields: object) -> Event:
    payload: dict[str, object] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": fields, "logprobs": None, "finish_reason": None}],
    }
    if usage is not None:
        payload["usage"] = {"prompt_tokens": 5, "completion_tokens": usage}
    return ev(payload)


def final(usage: dict[str, object], metrics: dict[str, object] | None = None) -> Event:
    payload: dict[str, object] = {"id": "c1", "model": "m", "choices": [], "usage": usage}
    if metrics is not None:
        payload["metrics"] = metrics
    return ev(payload)


def run(events: list[tuple[float, Event]], **meter: object) -> RequestTiming:
    """The figures with lazy parsing, checked equal to those of full parsing."""
    results = []
    for lazy in (True, False):
        m = StreamMeter(0.0, lazy=lazy, **meter)  # type: ignore[arg-type]
        for t, event in events:
            m.on_event(t, event)
        results.append(m.finish(events[-1][0]))
    assert results[0] == results[1]
    return results[0]


def reasoning_stream(key: str = "reasoning", usage: bool = False) -> list[tuple[float, Event]]:
    events = [(0.05, delta(role="assistant", content=""))]
    for i in range(10):  # 10 reasoning tokens, 0.1 s .. 1.0 s
        events.append((0.1 * (i + 1), delta(i + 1 if usage else None, **{key: f"r{i}"})))
    for i in range(5):  # the answer: 1.5 s .. 1.9 s
        events.append((1.5 + 0.1 * i, delta(11 + i if usage else None, content=f"a{i}")))
    return events


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_answer_ttft_is_the_first_answer_token_after_reasoning(key: str) -> None:
    r = run(reasoning_stream(key))
    assert r.ttft_s == pytest.approx(0.1)  # TTFT keeps its meaning: any output token
    assert r.answer_ttft_s == pytest.approx(1.5)
    assert r.reasoning_s == pytest.approx(1.4)
    assert r.reasoning_tokens == 10
    assert r.reasoning_source is ReasoningSource.COUNTED


def test_counted_reasoning_tokens_follow_per_chunk_usage() -> None:
    events = reasoning_stream(usage=True)
    events[5] = (events[5][0], delta(7, reasoning="rrr"))  # a chunk of 3 tokens
    for i in range(6, 11):
        events[i] = (events[i][0], delta(i + 2, reasoning="r"))
    r = run(events)
    assert r.reasoning_tokens == 12
    assert r.reasoning_source is ReasoningSource.COUNTED


def test_the_servers_reasoning_count_wins() -> None:
    events = reasoning_stream()
    usage = {"prompt_tokens": 5, "completion_tokens": 15}
    events.append((2.0, final({**usage, "completion_tokens_details": {"reasoning_tokens": 9}})))
    r = run(events)
    assert (r.reasoning_tokens, r.reasoning_source) == (9, ReasoningSource.SERVER)


def test_no_reasoning_means_no_reasoning_fields_and_answer_ttft_is_ttft() -> None:
    events = [(0.2 + 0.05 * i, delta(content=f"w{i}")) for i in range(5)]
    r = run(events)
    assert r.answer_ttft_s == r.ttft_s == pytest.approx(0.2)
    assert (r.reasoning_s, r.reasoning_tokens, r.reasoning_source) == (None, None, None)


def test_a_tool_call_is_the_answer() -> None:
    call = [{"index": 0, "id": "t", "type": "function", "function": {"name": "f"}}]
    events = [(0.1, delta(reasoning="think")), (0.7, delta(tool_calls=call))]
    r = run(events)
    assert r.answer_ttft_s == pytest.approx(0.7)
    assert r.reasoning_tokens == 1


def test_a_stream_cut_while_reasoning_has_no_answer_ttft() -> None:
    events = [(0.1 * (i + 1), delta(reasoning="r")) for i in range(4)]
    r = run(events)
    assert r.ttft_s == pytest.approx(0.1)
    assert r.answer_ttft_s is None
    assert r.reasoning_s == pytest.approx(0.3)


def test_cached_tokens_and_server_timings_from_the_final_usage_chunk() -> None:
    usage = {
        "prompt_tokens": 311,
        "total_tokens": 316,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 256, "created_cache_tokens": 0},
    }
    events = [(0.1 * (i + 1), delta(content="x")) for i in range(5)]
    events.append((0.6, final(usage, METRICS)))
    r = run(events)
    assert r.cached_tokens == 256
    assert r.server_queue_s == pytest.approx(0.05e-3)
    assert r.server_ttft_s == pytest.approx(18.96e-3)
    assert r.server_decode_s == pytest.approx(25.88e-3)
    assert r.server_itl_s == pytest.approx(6.47e-3)
    assert (r.spec_acceptance_rate, r.spec_acceptance_length) == (None, None)
    assert r.invalid_events == 0


def test_speculative_decoding_figures_when_sent() -> None:
    spec = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, "num_spec_tokens": 3}
    events = [(0.1, delta(content="x"))]
    events.append((0.2, final({"completion_tokens": 1}, {"speculative_decoding": spec})))
    r = run(events)
    assert (r.spec_acceptance_rate, r.spec_acceptance_length) == (0.5, 2.5)
    assert r.server_ttft_s is None  # metrics without timings: absent, not zero


def test_absent_on_the_wire_is_absent_in_the_record() -> None:
    events = [(0.1, delta(content="x")), (0.2, final({"completion_tokens": 1}))]
    r = run(events)
    fields = ("cached_tokens", "server_queue_s", "server_ttft_s", "server_decode_s")
    assert all(getattr(r, name) is None for name in fields)
    assert r.reasoning_tokens is None


@pytest.mark.parametrize(
    "usage, metrics",
    [
        ({"prompt_tokens_details": {"cached_tokens": -1}}, None),
        ({"prompt_tokens_details": {"cached_tokens": 2.5}}, None),
        ({"completion_tokens_details": {"reasoning_tokens": True}}, None),
        ({}, {"queue_time_ms": "1"}),
        ({}, {"time_to_first_token_ms": -3.0}),
        ({}, {"speculative_decoding": {"draft_acceptance_rate": "x"}}),
    ],
)
def test_a_value_that_is_not_a_count_or_duration_is_not_taken(
    usage: dict[str, object], metrics: dict[str, object] | None
) -> None:
    events = [(0.1, delta(content="x")), (0.2, final({"completion_tokens": 1, **usage}, metrics))]
    r = run(events)
    assert r.invalid_events == 1
    assert r.cached_tokens is None and r.server_queue_s is None and r.server_ttft_s is None
    assert r.reasoning_tokens is None and r.spec_acceptance_rate is None


def test_a_whole_response_carries_the_same_report() -> None:
    body = {
        "id": "c1",
        "choices": [{"index": 0, "message": {"content": "hi", "reasoning": "think"}}],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 32},
            "completion_tokens_details": {"reasoning_tokens": 7},
        },
        "metrics": METRICS,
    }
    m = StreamMeter(0.0)
    m.on_body(json.dumps(body).encode())
    r = m.finish(1.0)
    assert (r.cached_tokens, r.reasoning_tokens) == (32, 7)
    assert r.server_ttft_s == pytest.approx(18.96e-3)
    assert r.stalls is None and r.max_itl_s is None  # no stream, no gaps


def test_a_2s_stall_is_counted_once_with_its_length() -> None:
    times = [0.1, 0.15, 0.2, 2.2, 2.25, 2.3]
    r = run([(t, delta(content="x")) for t in times])
    assert r.stalls == 1
    assert r.max_itl_s == pytest.approx(2.0)


def test_the_stall_threshold_is_the_meters_setting() -> None:
    times = [0.1, 0.5, 0.9, 1.0]
    events = [(t, delta(content="x")) for t in times]
    assert run(events).stalls == 0
    assert run(events, stall_threshold_s=0.3).stalls == 2
