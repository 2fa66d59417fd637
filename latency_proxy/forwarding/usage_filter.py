"""Take back what the proxy asked the upstream for and the client did not. Pure, no I/O.

When the proxy adds `stream_options.include_usage`, vLLM appends a usage-only chunk — and
moves the keys it writes on a stream's last chunk (`system_fingerprint`) from the finish
chunk onto that usage chunk. So the finish chunk is held until the next event shows whether
the injected usage chunk follows; if it does, the usage chunk is dropped and its trailing
keys are spliced back into the held chunk, byte for byte where vLLM would have put them.
When the proxy added `continuous_usage_stats`, each chunk's `usage` is removed (the only
case where an event is re-serialised).
"""

from __future__ import annotations

import re

import orjson

from latency_proxy.measure.payload import EventKind
from latency_proxy.measure.sse import Event

_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')
_CHUNK_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage"})


class InjectedUsageFilter:
    __slots__ = ("_drop_usage_chunk", "_held", "_strip_chunk_usage")

    def __init__(self, drop_usage_chunk: bool, strip_chunk_usage: bool) -> None:
        self._drop_usage_chunk = drop_usage_chunk
        self._strip_chunk_usage = strip_chunk_usage
        self._held: bytes | None = None  # a finish chunk waiting to see what follows it

    def feed(self, event: Event, kind: EventKind) -> bytes:
        """The bytes to send for this event (possibly with a held one before them)."""
        held, self._held = self._held, None
        if kind is EventKind.USAGE_ONLY and self._drop_usage_chunk:
            return _with_trailing_keys(held, event.data) if held is not None else b""
        raw = event.raw
        data = event.data
        if self._strip_chunk_usage and data is not None and kind is not EventKind.DONE:
            raw = _without_usage(raw, data)
        if self._drop_usage_chunk and data is not None and _FINISHED.search(data):
            self._held = raw
            return held or b""
        return held + raw if held is not None else raw

    def flush(self) -> bytes:
        """What is still held when the stream ends."""
        held, self._held = self._held, None
        return held or b""


def _with_trailing_keys(held: bytes, usage_data: bytes | None) -> bytes:
    try:
        payload = orjson.loads(usage_data or b"")
    except orjson.JSONDecodeError:
        return held
    if not isinstance(payload, dict):
        return held
    extra = b"".join(
        b"," + orjson.dumps(key) + b":" + orjson.dumps(value)
        for key, value in payload.items()
        if key not in _CHUNK_KEYS and orjson.dumps(key) + b":" not in held
    )
    if not extra:
        return held
    end = held.rfind(b"}")
    return held[:end] + extra + held[end:] if end >= 0 else held


def _without_usage(raw: bytes, data: bytes) -> bytes:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return raw
    if not isinstance(payload, dict) or "usage" not in payload:
        return raw
    del payload["usage"]
    return b"data: " + orjson.dumps(payload) + b"\n\n"
