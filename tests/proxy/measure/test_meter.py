"""The meter's figures against hand-computed values (docs/reference/timing.md)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latency_proxy.measure.meter import StreamMeter, TokenSource
from latency_proxy.measure.payload import EventKind, classify
from latency_proxy.measure.sse import Event


def ev(payload: object) -> Event:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return Event(b"data: " + data + b"\n\n", data)


def chat(
    content: str | None = None,
    role: str | None = None,
    finish: str | None = None,
    usage: int | None = None,
    **delta: object,
) -> Event:
    d: dict[str, object] = dict(delta)
    if role:
        d["role"] = role
    if content is not None:
        d["content"] = content
    payload: dict[str, object] = {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": d, "finish_reason": finish}],
    }
    if usage is not None:
        payload["usage"] = {"prompt_tokens": 11, "completion_tokens": usage}
    return ev(payload)


def final_usage(tokens: int) -> Event:
    return ev(
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": tokens}}
    )


def test_role_first_stream_ttft_is_first_content_not_first_chunk() -> None:
    m = StreamMeter(t0=10.0)
    m.on_event(10.1, chat(role="assistant", content=""))
    m.on_event(10.5, chat("a"))
    m.on_event(10.6, chat("b"))
    m.on_event(10.8, chat("c", finish="stop"))
    m.on_event(10.8, final_usage(3))
    m.on_event(10.8, ev(b"[DONE]"))
    r = m.finish(11.0)
    assert r.time_to_first_chunk_s == pytest.approx(0.1)
    assert r.ttft_s == pytest.approx(0.5)
    assert r.tpot_s == pytest.approx(0.3 / 2)
    assert r.itl_s == pytest.approx([0.1, 0.2])
    assert r.e2e_s == pytest.approx(1.0)
    assert (r.output_tokens, r.input_tokens) == (3, 11)
    assert r.token_source is TokenSource.USAGE_TOTAL
    assert r.finish_reasons == ["stop"]
    assert r.ttfnt_s == {3: pytest.approx(0.8)}
    assert (r.response_id, r.response_model) == ("c1", "m")


def test_multi_token_chunks_tpot_from_usage_not_events() -> None:
    # 3 chunks of 4 tokens, continuous usage: TPOT divides by tokens - 1 = 11
    m = StreamMeter(t0=0.0, first_n=(1, 3, 5, 12))
    m.on_event(0.05, chat(role="assistant", content="", usage=0))
    m.on_event(0.2, chat("aaaa", usage=4))
    m.on_event(0.3, chat("bbbb", usage=8))
    m.on_event(0.4, chat("cccc", usage=12, finish="length"))
    r = m.finish(0.45)
    assert r.token_source is TokenSource.USAGE_PER_CHUNK
    assert r.output_tokens == 12
    assert r.tpot_s == pytest.approx(0.2 / 11)
    assert r.tokens_per_chunk == [4, 4, 4]
    assert r.ttfnt_s == {
        1: pytest.approx(0.2),
        3: pytest.approx(0.2),
        5: pytest.approx(0.3),
        12: pytest.approx(0.4),
    }


def test_final_usage_spreads_tokens_evenly_for_ttfnt() -> None:
    m = StreamMeter(t0=0.0, first_n=(3, 6))
    for i, t in enumerate((1.0, 2.0, 3.0)):
        m.on_event(t, chat(f"chunk{i}"))
    m.on_event(3.0, final_usage(6))  # 2 tokens per chunk
    r = m.finish(3.0)
    assert r.ttfnt_s == {3: 2.0, 6: 3.0}
    assert r.tokens_per_chunk == []  # not measured per chunk: not reported
    assert r.tpot_s == pytest.approx(2.0 / 5)


def test_no_usage_counts_content_events_and_done_less_ending() -> None:
    m = StreamMeter(t0=0.0)
    m.on_event(0.1, chat("a"))
    m.on_event(0.3, chat("b"))
    r = m.finish(0.4)
    assert r.token_source is TokenSource.EVENTS
    assert r.output_tokens == 2
    assert r.tpot_s == pytest.approx(0.2)
    assert 3 not in r.ttfnt_s


def test_empty_deltas_and_usage_only_are_not_content() -> None:
    m = StreamMeter(t0=0.0)
    assert m.on_event(0.1, chat(content="")) is EventKind.OTHER
    assert m.on_event(0.2, chat(content=None)) is EventKind.OTHER
    assert m.on_event(0.3, final_usage(0)) is EventKind.USAGE_ONLY
    assert m.on_event(0.4, ev(b"[DONE]")) is EventKind.DONE
    assert m.on_event(0.5, ev(b"{not json")) is EventKind.INVALID
    assert m.on_event(0.6, Event(b": keepalive\n\n", None)) is EventKind.OTHER
    r = m.finish(1.0)
    assert r.ttft_s is None and r.tpot_s is None
    assert r.time_to_first_chunk_s == pytest.approx(0.1)
    assert r.output_tokens == 0
    assert r.invalid_events == 1


def test_partial_utf8_empty_text_chunk_still_counts_its_tokens() -> None:
    # vLLM sends "" while a multi-byte character is incomplete; usage still counts the token
    m = StreamMeter(t0=0.0)
    m.on_event(0.1, ev({"choices": [{"index": 0, "text": "a"}], "usage": {"completion_tokens": 1}}))
    assert (
        m.on_event(
            0.2, ev({"choices": [{"index": 0, "text": ""}], "usage": {"completion_tokens": 2}})
        )
        is EventKind.OTHER
    )
    m.on_event(0.3, ev({"choices": [{"index": 0, "text": "é"}], "usage": {"completion_tokens": 3}}))
    r = m.finish(0.3)
    assert r.output_tokens == 3
    assert r.tokens_per_chunk == [1, 2]
    assert r.tpot_s == pytest.approx(0.1)


@pytest.mark.parametrize(
    "delta", [{"reasoning_content": "think"}, {"tool_calls": [{"id": "t"}]}, {"reasoning": "think"}]
)
def test_reasoning_and_tool_calls_are_content(delta: dict) -> None:
    assert classify({"choices": [{"delta": delta}]}) is EventKind.CONTENT


def test_in_stream_error_keeps_only_its_type() -> None:
    m = StreamMeter(t0=0.0)
    m.on_event(0.1, ev({"error": {"message": "prompt SECRET too long", "type": "BadRequest"}}))
    r = m.finish(0.2)
    assert r.error_type == "BadRequest"
    assert "SECRET" not in repr(r)


def test_non_streaming_body() -> None:
    m = StreamMeter(t0=0.0)
    m.on_body(
        json.dumps(
            {
                "id": "x",
                "model": "m",
                "choices": [{"finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 9},
            }
        ).encode()
    )
    r = m.finish(2.0)
    assert (r.e2e_s, r.input_tokens, r.output_tokens, r.ttft_s) == (2.0, 5, 9, None)


@given(st.lists(st.floats(0.001, 1.0), min_size=2, max_size=50), st.integers(1, 8))
def test_tpot_times_tokens_spans_first_to_last(gaps: list[float], k: int) -> None:
    m = StreamMeter(t0=0.0)
    t = 0.5
    for i, gap in enumerate(gaps):
        m.on_event(t, chat("x" * k, usage=(i + 1) * k))
        t += gap
    r = m.finish(t)
    n_tokens = len(gaps) * k
    assert r.output_tokens == n_tokens
    span = sum(gaps[:-1])
    assert r.tpot_s == pytest.approx(span / (n_tokens - 1))
    assert sum(r.itl_s) == pytest.approx(span)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)  # orjson reads up to 2**64 - 1 as an integer
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "usage",
                    "delta",
                    "text",
                    "content",
                    "completion_tokens",
                    "prompt_tokens",
                    "finish_reason",
                    "error",
                    "id",
                    "model",
                    "type",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(st.lists(JSON, max_size=8), st.booleans())
def test_any_json_the_upstream_sends_is_counted_never_raised(payloads: list, lazy: bool) -> None:
    """Valid JSON that is not a chunk, or counts out of any range: the meter takes what it
    can, counts the rest as invalid events, and finishes."""
    meter = StreamMeter(0.0, (1, 3), collect_text=True, lazy=lazy)
    for i, payload in enumerate(payloads):
        meter.on_event(0.1 * (i + 1), ev(payload))
    meter.on_body(json.dumps(payloads[0] if payloads else None).encode())
    r = meter.finish(1.0)
    assert r.events == len(payloads)
    assert r.output_tokens is None or 0 <= r.output_tokens <= 2**53


def test_counts_that_are_not_counts_are_invalid_events() -> None:
    meter = StreamMeter(0.0)
    meter.on_event(0.1, chat("a"))
    meter.on_event(
        0.2,
        ev(
            {
                "choices": [{"delta": {"content": "b"}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2**64 - 1},
            }
        ),
    )
    meter.on_event(
        0.3, ev({"choices": [], "usage": {"prompt_tokens": True, "completion_tokens": 2}})
    )
    r = meter.finish(0.4)
    assert (r.invalid_events, r.input_tokens, r.output_tokens) == (2, 7, 2)
    assert r.token_source is TokenSource.USAGE_TOTAL


def test_all_tokens_in_one_event_leave_tpot_unmeasured_not_zero() -> None:
    """A server that buffers the answer into one event: usage says 50 tokens, the stream
    gives one content time; a TPOT of 0 would pull the percentiles down."""
    m = StreamMeter(t0=0.0)
    m.on_event(0.5, chat("all fifty tokens at once", finish="stop"))
    m.on_event(0.5, final_usage(50))
    r = m.finish(0.6)
    assert (r.ttft_s, r.output_tokens, r.content_events) == (pytest.approx(0.5), 50, 1)
    assert r.tpot_s is None and r.itl_s == []
