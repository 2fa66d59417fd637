"""The hot path: upstream bytes to the client as they arrive, and the watch for a client
that leaves.

The body is relayed inside the upstream connection's data callback: each chunk is parsed,
metered and written to the client's transport before the callback returns (no task
wake-up, no ASGI send per chunk; upstream/connection.py, writers.ClientWriter). Only
when the proxy injected a usage request does it hold bytes back, and then never longer than
the end of the current event, so it can drop the one event the client did not ask for. A
client whose write buffer fills pauses the upstream's reads until it drains. Per chunk the
sinks touch closure names only; what they count goes onto the exchange once, however the
relay ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from latency_proxy.base.asgi import Receive, Scope
from latency_proxy.forwarding.usage_filter import InjectedUsageFilter
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from latency_proxy.record.exchange import Exchange
from latency_proxy.server.extensions import ON_GONE
from latency_proxy.server.write_watch import WriteWatch
from latency_proxy.server.writers import BodyWriter
from latency_proxy.upstream.connection import Response

perf_counter = time.perf_counter
MAX_MEASURED_BODY = 8 * 2**20  # non-streaming bodies kept for usage parsing up to this size


class Backpressure:
    """Writes to the client; a full write buffer pauses the upstream until it drains, and
    the write watch counts the wait as a pending write (write_watch.py)."""

    __slots__ = ("_response", "_watch", "_writer", "held")

    def __init__(self, response: Response, writer: BodyWriter, watch: WriteWatch) -> None:
        self._response = response
        self._writer = writer
        self._watch = watch
        self.held = False
        writer.on_writable = self._release

    def write(self, data: bytes) -> None:
        if self._writer.write(data) and not self.held:
            self.held = True
            self._response.pause_reading()
            self._watch.held()

    def _release(self) -> None:
        if self.held:
            self.held = False
            self._response.resume_reading()
            self._watch.released()

    async def drain(self) -> None:
        """Wait until every write went out (only an ASGI writer ever waits)."""
        await self._writer.drain()

    def stop(self) -> None:
        """After the last write: a wait still pending is the final send's to count."""
        self._writer.close()
        self._release()


async def relay_body(
    exchange: Exchange,
    response: Response,
    flow: Backpressure,
    meter: StreamMeter | None,
) -> None:
    """Pass a body through unparsed; a model call's (up to a size) is measured at its end."""
    keep = meter is not None
    kept: list[bytes] = []
    kept_size = 0
    sent = 0
    write = flow.write

    def sink(t: float, chunk: bytes) -> None:
        nonlocal kept_size, sent
        sent += len(chunk)
        if keep and kept_size + len(chunk) <= MAX_MEASURED_BODY:
            kept.append(chunk)
            kept_size += len(chunk)
        write(chunk)

    try:
        response.stream(sink)
        await response.done  # the caller lets go of the upstream however this ends
    finally:
        exchange.sent(sent)
    if meter is not None:
        meter.on_body(b"".join(kept))
        exchange.meter = meter


async def relay_events(
    exchange: Exchange,
    response: Response,
    flow: Backpressure,
    meter: StreamMeter,
    max_event_bytes: int,
) -> None:
    """Pass an event stream through, timing every event as its chunk arrives (an event
    past max_event_bytes passes through unmetered: sse.py)."""
    exchange.meter = meter
    call = exchange.call
    assert call is not None
    parser = SSEParser(max_event_bytes)
    feed = parser.feed
    on_event = meter.on_event
    write = flow.write
    usage_filter = None
    if call.injected_usage or call.injected_continuous_usage:
        usage_filter = InjectedUsageFilter(call.injected_usage, call.injected_continuous_usage)
    overhead = 0.0
    chunks = 0
    sent = 0

    def sink(t: float, chunk: bytes) -> None:
        nonlocal overhead, chunks, sent
        events = feed(chunk)
        if usage_filter is not None:
            if len(events) == 1:  # the usual chunk: one event
                out = usage_filter.feed(events[0], on_event(t, events[0]))
            else:
                out = b"".join([usage_filter.feed(e, on_event(t, e)) for e in events])
        else:
            for event in events:
                on_event(t, event)
            out = chunk
        if out:
            sent += len(out)
            write(out)
        overhead += perf_counter() - t
        chunks += 1

    try:
        try:
            response.stream(sink)
            await response.done
        finally:
            # what was held back goes out however the upstream ended (not to a client
            # that is gone: then this task was cancelled and the write is skipped)
            tail = usage_filter.flush() + parser.remainder() if usage_filter else b""
            if tail and not _cancelling():
                sent += len(tail)
                write(tail)
    finally:
        exchange.sent(sent)
        exchange.overhead_event_sum = overhead
        exchange.overhead_events = chunks
        exchange.oversized_events = parser.oversized


async def cancel_on_disconnect(
    work: Coroutine[Any, Any, None],
    scope: Scope,
    receive: Receive,
    writes: WriteWatch | None = None,
) -> bool:
    """Run `work` in this task; if the client disconnects first, or stops reading past the
    write timeout (`writes`), cancel it (which aborts the upstream request) and return True.

    Under the proxy's own uvicorn protocol the server says when the client is gone
    (ON_GONE); elsewhere a task of its own waits on `receive` for `http.disconnect`."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    def cancel() -> None:
        nonlocal gone
        gone = True
        task.cancel()

    watch = scope.get("extensions", {}).get(ON_GONE)
    if watch is not None:
        unwatch = watch(cancel)
    else:
        unwatch = asyncio.create_task(_watch_disconnect(receive, cancel)).cancel
    if writes is not None:
        writes.start(cancel)
    try:
        await work
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        return True
    finally:
        unwatch()
        if writes is not None:
            writes.stop()
    return False


async def _watch_disconnect(receive: Receive, on_gone: Callable[[], None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_gone()
            return


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
