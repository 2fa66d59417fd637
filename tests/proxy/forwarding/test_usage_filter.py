"""The injected-usage filter: the client sees the stream it would have seen directly."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from latency_proxy.forwarding.usage_filter import InjectedUsageFilter
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser


def sse(*payloads: object) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, bytes) else orjson.dumps(p)) + b"\n\n" for p in payloads
    )


BASE = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(content: str | None = None, finish: str | None = None, **extra: object) -> dict:
    delta = {} if content is None else {"content": content}
    return {**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def vllm_stream(include_usage: bool, continuous: bool = False) -> bytes:
    """What vLLM 0.32 sends: system_fingerprint on the stream's last chunk."""

    def usage(n: int) -> dict:
        return {"usage": {"prompt_tokens": 3, "total_tokens": 3 + n, "completion_tokens": n}}

    per_chunk = continuous and include_usage
    events = [chunk("", **(usage(0) if per_chunk else {}))]
    events += [chunk(t, **(usage(i + 1) if per_chunk else {})) for i, t in enumerate("ab")]
    last = chunk("c", "stop", **(usage(3) if per_chunk else {}))
    if include_usage:
        events += [last, {**BASE, "choices": [], **usage(3), "system_fingerprint": "fp"}]
    else:
        events += [{**last, "system_fingerprint": "fp"}]
    return sse(*events, b"[DONE]")


def run(stream: bytes, cuts: list[int], drop: bool, strip: bool) -> bytes:
    parser, meter, usage_filter = SSEParser(), StreamMeter(0.0), InjectedUsageFilter(drop, strip)
    out, last = b"", 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        for event in parser.feed(stream[last:cut]):
            out += usage_filter.feed(event, meter.on_event(1.0, event))
        last = cut
    return out + usage_filter.flush() + parser.remainder()


@given(st.lists(st.integers(0, 1200), max_size=12))
def test_injected_usage_chunk_dropped_and_fingerprint_moved_back(cuts: list[int]) -> None:
    assert run(vllm_stream(True), cuts, drop=True, strip=False) == vllm_stream(False)


@given(st.lists(st.integers(0, 1200), max_size=12))
def test_injected_continuous_usage_removed_from_every_chunk(cuts: list[int]) -> None:
    out = run(vllm_stream(True, continuous=True), cuts, drop=True, strip=True)
    assert out == vllm_stream(False)


def test_nothing_injected_passes_bytes_through() -> None:
    stream = vllm_stream(True)
    assert run(stream, [], drop=False, strip=False) == stream


def test_stream_ending_after_the_finish_chunk_still_delivers_it() -> None:
    stream = sse(chunk("a"), chunk("b", "length"))
    assert run(stream, [40], drop=True, strip=False) == stream


def test_existing_key_is_not_duplicated() -> None:
    stream = sse(
        chunk("a", "stop", system_fingerprint="x"),
        {**BASE, "choices": [], "usage": {"completion_tokens": 1}, "system_fingerprint": "x"},
    )
    assert run(stream, [], drop=True, strip=False) == sse(
        chunk("a", "stop", system_fingerprint="x")
    )
