"""The main port's HTTP/1.1 connections: uvicorn's httptools protocol, with the limits and
timeouts a server facing untrusted clients needs, enforced as bytes arrive.

uvicorn hands the app a request only once its head is complete, and httptools keeps every
header byte it has seen until then, so a head that never ends would be held whole; and
nothing closes a connection that never sends a request, or sends it a byte at a time. This
protocol counts the bytes of a head still arriving and refuses it (431, connection closed)
as soon as it passes the limit; closes a connection whose head is not complete within
`header_timeout` of its accept (or of the first byte of a later request on it); closes a
kept-alive connection silent for `idle_timeout` (uvicorn's keep-alive timer); and lets the
app end a connection without completing its response (`abort_connection`), so a body the
upstream cut short is cut short for the client too. Complete heads are checked exactly
(count, names and values) by forward.py, which records the refusal; a head refused here is
not a request yet, so like a malformed one (uvicorn's 400) it is answered, not recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from latency_proxy.responses import HEADERS_TOO_LARGE, error_body
from latency_proxy.types import Scope

ABORT = "latency_proxy.abort"  # the scope extension abort_connection calls
WRITER = "latency_proxy.writer"  # the scope extension client_writer returns
REQUEST_LINE_ALLOWANCE = 8 * 1024  # a head's bytes beyond its names and values
_REFUSAL = error_body(431, *HEADERS_TOO_LARGE)
_REFUSAL_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_REFUSAL) + _REFUSAL
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_head_bytes: int  # a head still arriving is refused past this many bytes
    header_timeout: float  # accept (or a later request's first byte) to the end of its head


def protocol_class(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The protocol uvicorn builds per connection (its `http` setting), with these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


def abort_connection(scope: Scope) -> None:
    """Close the client's connection without completing the response; under a server
    without the extension, returning without the final body message does the same."""
    abort = scope.get("extensions", {}).get(ABORT)
    if abort is not None:
        abort()


class ClientWriter:
    """A response body written straight onto the client's transport, framed as uvicorn
    frames it, from inside the upstream's data callback: no ASGI send (a coroutine, and a
    task wake-up) per chunk. The response head and its end still go through ASGI `send`.
    `on_writable` runs when a full write buffer has drained (uvicorn's flow control)."""

    __slots__ = ("_cycle", "_transport", "on_writable")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self.on_writable: Callable[[], None] | None = None

    def write(self, body: bytes) -> bool:
        """Write a body chunk; True when the client's write buffer is now over uvicorn's
        high-water mark (the caller stops reading until `on_writable`)."""
        cycle = self._cycle
        if cycle.disconnected or cycle.response_complete or not cycle.response_started:
            return False
        if cycle.chunked_encoding:  # always, but for HEAD, 204 and 304: no body then
            self._transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return cycle.flow.write_paused


def client_writer(scope: Scope) -> ClientWriter:
    """The writer for this request's response body, once its head is sent."""
    return scope["extensions"][WRITER]()  # type: ignore[typeddict-item]


def _abort(cycle: RequestResponseCycle) -> None:
    cycle.disconnected = True  # uvicorn: nothing more to send, nothing to complete
    cycle.transport.close()  # what was written still goes out, then the FIN


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes: int | None = 0  # bytes of the head being read; None: none is
        self._header_timer: asyncio.TimerHandle | None = None
        self._writer: ClientWriter | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
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
            extensions = self.scope.setdefault("extensions", {})
            extensions[ABORT] = lambda: _abort(cycle)  # type: ignore[typeddict-unknown-key]
            extensions[WRITER] = lambda: self._writer_for(cycle)  # type: ignore[typeddict-unknown-key]

    def _writer_for(self, cycle: RequestResponseCycle) -> ClientWriter:
        self._writer = ClientWriter(cycle)
        return self._writer

    def resume_writing(self) -> None:
        super().resume_writing()
        writer = self._writer
        if writer is not None and writer.on_writable is not None:
            writer.on_writable()

    def _refuse_head(self) -> None:
        self._cancel_header_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # a response is still going out: end after it
            self.transport.pause_reading()
            return
        self.transport.write(_REFUSAL_RESPONSE)
        self.transport.close()

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
        elif not self.transport.is_closing():
            self.transport.close()
