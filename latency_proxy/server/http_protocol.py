"""The main port's HTTP/1.1 connections: uvicorn's httptools protocol, with the limits and
timeouts a server facing untrusted clients needs, enforced as bytes arrive.

uvicorn hands the app a request only once its head is complete, and httptools keeps every
header byte it has seen until then, so a head that never ends would be held whole; and
nothing closes a connection that never sends a request, or sends it a byte at a time. This
protocol counts the bytes of a head still arriving and refuses it (431, connection closed)
as soon as it passes the limit; closes a connection whose head is not complete within
`header_timeout` of its accept (or of the first byte of a later request on it); closes a
kept-alive connection silent for `idle_timeout` (uvicorn's keep-alive timer); aborts a
connection closed with bytes still unsent once `write_timeout` passes without their going
out (a client that stopped reading holds no socket); marks every request still answered on
a connection the client closed as disconnected, pipelined ones included; frames an
HTTP/1.0 request's body by closing the connection, not by chunks (http10.py); and lets the
app end a connection without completing its response (`abort_connection`), so a body the
upstream cut short is cut short for the client too. Complete heads are checked exactly
(count, names and values) by forward.py, which records the refusal; a head refused here is
not a request yet, so like a malformed one (uvicorn's 400) it is answered, not recorded.
The body's timer is the app's (request.read_body), so it holds under any ASGI server.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from latency_proxy.server.extensions import BODY_AT_HAND, HEADERS_TOO_LARGE, ON_GONE
from latency_proxy.server.http10 import Http10Cycle
from latency_proxy.server.uvicorn_internals import HttpToolsProtocol, RequestResponseCycle
from latency_proxy.server.writers import ABORT, WRITER, ClientWriter

REQUEST_LINE_ALLOWANCE = 8 * 1024  # a head's bytes beyond its names and values
_REFUSAL = HEADERS_TOO_LARGE.body()
_REFUSAL_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_REFUSAL) + _REFUSAL
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_head_bytes: int  # a head still arriving is refused past this many bytes
    header_timeout: float  # accept (or a later request's first byte) to the end of its head
    write_timeout: float = 0.0  # a closed connection's unsent bytes, then abort; 0: never


def protocol_class(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The protocol uvicorn builds per connection (its `http` setting), with these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes: int | None = 0  # bytes of the head being read; None: none is
        self._header_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._writer: ClientWriter | None = None
        self._open: list[RequestResponseCycle] = []  # responses not complete, in order
        self._on_gone: dict[RequestResponseCycle, Callable[[], None]] = {}  # relay.ON_GONE

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn: a stream socket gets a Transport
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        if self._linger is not None:
            self._linger.cancel()
        # uvicorn marks only the newest request gone; a stream ahead of a pipelined one
        # would write on to a closed transport
        for cycle in self._open:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
                on_gone = self._on_gone.pop(cycle, None)
                if on_gone is not None:
                    on_gone()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_bytes is not None and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        if self._header_timer is None:
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._cancel_header_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            if self.scope["http_version"] == "1.0":
                cycle.__class__ = Http10Cycle
            # uvicorn's types hold only dicts there; ours are calls the app makes. They
            # reach the cycle by a weak reference: the cycle holds the scope, so a strong
            # one would make every request a loop that only the garbage collector frees
            # (its passes then scan each finished request, and its full ones stall streams)
            this = weakref.ref(cycle)
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            extensions[ABORT] = lambda flush: self._abort(_alive(this), flush)
            extensions[WRITER] = lambda: self._writer_for(_alive(this))
            extensions[ON_GONE] = lambda on_gone: self._watch(_alive(this), on_gone)
            extensions[BODY_AT_HAND] = lambda: _body_at_hand(_alive(this))
            self._open = [c for c in self._open if not c.response_complete]
            self._open.append(cycle)

    def on_response_complete(self) -> None:
        if self.transport.is_closing():  # the response asked for the close
            self._close()
        super().on_response_complete()

    def timeout_keep_alive_handler(self) -> None:
        self._close()

    def _writer_for(self, cycle: RequestResponseCycle) -> ClientWriter:
        self._writer = ClientWriter(cycle)
        return self._writer

    def _watch(
        self, cycle: RequestResponseCycle, on_gone: Callable[[], None]
    ) -> Callable[[], None]:
        """Call on_gone once the client leaves before cycle's response is complete: what a
        task waiting in receive() for `http.disconnect` learns, without the task. Returns
        the call that ends the watch."""
        if cycle.disconnected:
            return self.loop.call_soon(on_gone).cancel
        cycle.flow.resume_reading()  # as receive() does: a paused read never sees the close
        self._on_gone[cycle] = on_gone

        def unwatch() -> None:
            self._on_gone.pop(cycle, None)

        return unwatch

    def resume_writing(self) -> None:
        super().resume_writing()
        writer = self._writer
        if writer is not None and writer.on_writable is not None:
            writer.on_writable()

    def _abort(self, cycle: RequestResponseCycle, flush: bool) -> None:
        cycle.disconnected = True  # uvicorn: nothing more to send, nothing to complete
        if flush:
            self._close()  # what was written still goes out (within the write timeout)
        else:
            self.transport.abort()

    def _close(self) -> None:
        """Close after the unsent bytes went out, or abort if they are still unsent after
        the write timeout (a graceful close waits for a reader that may never read)."""
        transport = self.transport
        if not transport.is_closing():
            transport.close()
        timeout = self.limits.write_timeout
        if timeout > 0 and self._linger is None and transport.get_write_buffer_size():
            self._linger = self.loop.call_later(timeout, transport.abort)

    def _refuse_head(self) -> None:
        self._cancel_header_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # a response is still going out: end after it
            self.transport.pause_reading()
            return
        self.transport.write(_REFUSAL_RESPONSE)
        self._close()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._header_late)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_late(self) -> None:
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # pipelined behind a response: close after it
        else:
            self._close()


def _alive(this: weakref.ReferenceType[RequestResponseCycle]) -> RequestResponseCycle:
    """The request's cycle: alive while its app runs, as the app's task holds its send."""
    cycle = this()
    if cycle is None:
        raise RuntimeError("the request's connection cycle is gone")
    return cycle


def _body_at_hand(cycle: RequestResponseCycle) -> bytes | None:
    """The body, if it arrived whole with the head: what receive() would return at once,
    taken as it takes it, without the wait. None when receive() has more to do (a body
    still arriving, a 100 Continue to send, a client gone)."""
    if cycle.more_body or cycle.waiting_for_100_continue or cycle.disconnected:
        return None
    body = bytes(cycle.body)
    cycle.body = bytearray()
    cycle.message_event.clear()
    cycle.flow.resume_reading()
    return body
