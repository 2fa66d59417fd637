"""One HTTP/1.1 connection to an upstream: a request written whole, its response read by
httptools inside the event loop's data callback.

The proxy owns this layer because the benchmark said so: with aiohttp, a third of the
proxy's CPU per event went to the client's reader (a buffer append, a future, a task
wake-up and a rescheduled timer per chunk; README, "Performance"). Here a body chunk goes
from `data_received` to the response's sink in the same callback, and the read timeout is
one timer per request that re-arms itself from the time of the last read.

Everything an upstream can do wrong ends the response exactly once, with an exception the
caller maps to an outcome: `ConnectError` (no connection), `ProtocolError` (it broke
HTTP/1.1: a malformed head or framing, a status outside 100-599, a 101 nobody asked for, a
transfer coding other than plain `chunked`, a head past `MAX_HEAD_BYTES` status line
included, a body cut short by a close), `TimeoutError` (silent past the read timeout).
"""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Callable
from typing import Any

import httptools

perf_counter = time.perf_counter
MAX_HEAD_BYTES = 64 * 1024  # a response head larger than this is refused (aiohttp: 8 KiB a line)
HELD_BEFORE_STREAM = 256 * 1024  # body bytes kept before the relay takes over; then: pause
_NO_BODY_STATUS = frozenset({204, 304})
_CHUNKED = b"chunked"

Sink = Callable[[float, bytes], None]  # (perf_counter at the read, body bytes)


class UpstreamError(Exception):
    """The upstream exchange failed; the message names how, never what was sent."""


class ConnectError(UpstreamError):
    """No connection: refused, unreachable, unknown host, or a failed TLS handshake."""


class OutOfFiles(ConnectError):
    """No connection because this process has no file descriptor left: the proxy's own
    failure, not the upstream's (callers that only probe treat it as any connect error)."""


class ProtocolError(UpstreamError):
    """The upstream broke the HTTP exchange."""

    def __init__(self, message: str, answered: bool, sent: bool = True) -> None:
        super().__init__(message)
        self.answered = answered  # any byte of a response had arrived
        self.sent = sent  # the request was written (the upstream may have acted on it)


class Response:
    """One response: its head, then its body handed to a sink as it arrives.

    Body bytes that arrive before `stream` is called (with the head, or while the caller
    sends its own head on) are kept and handed over first. `done` settles when the body
    is complete (None) or failed (the exception).
    """

    __slots__ = ("_chunks", "_connection", "_held", "done", "raw_headers", "status")

    def __init__(self, connection: Connection, status: int, raw_headers: list[tuple[bytes, bytes]]):
        self._connection: Connection | None = connection
        self.status = status
        self.raw_headers = raw_headers
        self.done: asyncio.Future[None] = connection.loop.create_future()
        self.done.add_done_callback(_retrieve)
        self._chunks: list[tuple[float, bytes]] = []
        self._held = 0  # bytes in _chunks

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (name in lowercase)."""
        for key, value in self.raw_headers:
            if key.lower() == name:
                return value
        return None

    def stream(self, sink: Sink) -> None:
        """Hand the body to `sink` from now on, what arrived so far first."""
        if self._held > HELD_BEFORE_STREAM:
            self.resume_reading()  # before the sink, which may pause again for its client
        self._held = 0
        chunks, self._chunks = self._chunks, []
        for t, chunk in chunks:
            sink(t, chunk)
        if self._connection is not None:
            self._connection.sink = sink  # from now on, called straight from on_body

    def pause_reading(self) -> None:
        """Stop reading the upstream (the client is slow); the read timeout waits too."""
        if self._connection is not None:
            self._connection.pause_reading()

    def resume_reading(self) -> None:
        if self._connection is not None:
            self._connection.resume_reading()

    def close(self) -> None:
        """Abandon the body: a connection still reading it is closed, never reused."""
        connection, self._connection = self._connection, None
        if connection is not None:  # still reading (done may be cancelled with its waiter)
            connection.abandon()

    def _body(self, t: float, chunk: bytes) -> None:
        """The connection's sink until `stream`: keep what arrives."""
        self._chunks.append((t, chunk))
        self._held += len(chunk)
        if self._held > HELD_BEFORE_STREAM and self._connection is not None:
            self._connection.pause_reading()  # stream() resumes it

    def _end(self, error: BaseException | None) -> None:
        self._connection = None
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)


class Connection(asyncio.Protocol):
    """The protocol of one pooled connection; the pool calls `request` once at a time."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        read_timeout: float,
        on_idle: Callable[[Connection], None],
        on_closed: Callable[[Connection], None],
    ) -> None:
        self.loop = loop
        self._read_timeout = read_timeout
        self._on_idle = on_idle
        self._on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # set by the pool when it hands out a connection used before
        self.idle_since = 0.0
        self._parser: httptools.HttpResponseParser | None = None
        self._head: asyncio.Future[Response] | None = None
        self._response: Response | None = None
        self.sink: Sink | None = None  # where the current response's body goes
        self._head_only = False
        self._head_bytes = 0  # bytes read while the head is incomplete
        self._header_size = 0  # the header lines parsed so far
        self._headers: list[tuple[bytes, bytes]] = []
        self._until_close = False  # a body without length or chunks: it ends with the connection
        self._keep_alive = False
        self._answered = False
        self._last_read = 0.0
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._read_time = perf_counter()

    # the pool's side

    def request(self, head: bytes, body: bytes, head_only: bool) -> asyncio.Future[Response]:
        """Write the request; the future is its response's head."""
        assert self.transport is not None and self._head is None
        if self.closed or self.transport.is_closing():  # lost on its way out of the pool
            failed = self.loop.create_future()
            failed.set_exception(ProtocolError("upstream closed the connection", False, False))
            return failed
        self._parser = httptools.HttpResponseParser(self)
        self._head = self.loop.create_future()
        self._head.add_done_callback(_retrieve)
        self._head_only = head_only
        self._head_bytes = self._header_size = 0
        self._answered = False
        self._last_read = self.loop.time()
        self._timer = self.loop.call_at(self._last_read + self._read_timeout, self._check_read)
        self.transport.write(head + body if body else head)
        return self._head

    def pause_reading(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self._last_read = self.loop.time()  # the upstream's silence counts from now
            self.transport.resume_reading()

    def readable(self) -> bool:
        """Bytes or an end the loop has not read yet. On an idle connection either one ends
        it (the upstream closed it, or sent what nobody asked for): one poll, no wait, as
        urllib3 and httpcore check a pooled connection before reusing it."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return True
        try:
            return bool(select.select([sock.fileno()], [], [], 0)[0])
        except (OSError, ValueError):  # closed under us
            return True

    def abandon(self) -> None:
        self._fail(ProtocolError("the proxy stopped reading", self._answered))

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self._closed()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's is a Transport

    def data_received(self, data: bytes) -> None:
        self._read_time = perf_counter()
        self._last_read = self.loop.time()
        parser = self._parser
        if parser is None:  # bytes while idle: not HTTP this connection can carry on with
            self.close()
            return
        self._answered = True
        if self._head is not None:  # the head is still to come
            self._head_bytes += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            self._fail(exc.__cause__ or exc.__context__ or exc)
            return
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"malformed response: {exc}", True))
            return
        except httptools.HttpParserUpgrade:  # a 101 is refused in on_headers_complete: a guard
            self._fail(ProtocolError("the upstream switched protocols", True))
            return
        if self._head is not None and self._head_bytes > MAX_HEAD_BYTES:
            self._fail(ProtocolError("response head too large", True))

    def eof_received(self) -> bool:
        self._lost(eof=True)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(eof=False)  # a reset, or our own close: no body ends that way
        self._closed()

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._parser is None:  # bytes after the response, in the same read
            raise ProtocolError("response without a request", True)

    def on_status(self, reason: bytes) -> None:
        self._grow_head(len(reason))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        self._headers.append((name, value))

    def _grow_head(self, size: int) -> None:
        """The head's limit, counted as it parses (a head that arrived whole in one read)."""
        self._header_size += size
        if self._header_size > MAX_HEAD_BYTES:
            raise ProtocolError("response head too large", True)

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None and self._head is not None  # on_message_begin saw to it
        status = parser.get_status_code()
        if not 100 <= status <= 599:  # RFC 9110 §15: three digits, 1xx to 5xx
            raise ProtocolError("status code outside 100-599", True)
        if status == 101:  # the proxy never asks for an upgrade (RFC 9110 §15.2.2)
            raise ProtocolError("101 Switching Protocols to a request without Upgrade", True)
        if status < 200:  # informational (100, 103): not the answer
            self._headers = []
            self._header_size = 0
            return
        headers, self._headers = self._headers, []
        chunked = _framing(headers)
        length = any(name.lower() == b"content-length" for name, _ in headers)
        no_body = self._head_only or status in _NO_BODY_STATUS
        self._until_close = not (no_body or chunked or length)
        self._keep_alive = parser.should_keep_alive() and not self._until_close
        response = Response(self, status, headers)
        self._response = response
        self.sink = response._body
        head, self._head = self._head, None
        if not head.done():  # not cancelled with its waiter
            head.set_result(response)
        if self._head_only:  # no body follows, whatever the head says
            self._complete()

    def on_body(self, body: bytes) -> None:
        sink = self.sink
        if sink is not None:
            sink(self._read_time, body)

    def on_message_complete(self) -> None:
        if self._response is not None:
            self._complete()

    # the end of one exchange

    def _complete(self) -> None:
        response, self._response = self._response, None
        self._finish()
        self.resume_reading()  # if paused for this response's client: not for the next
        if response is not None:
            response._end(None)
        if self._keep_alive and not self.closed:
            self.idle_since = self.loop.time()
            self._on_idle(self)
        else:
            self.close()

    def _fail(self, error: BaseException) -> None:
        head, response = self._head, self._response
        self._response = None
        self._finish()
        self.close()
        if head is not None and not head.done():
            head.set_exception(error)
        elif response is not None:
            response._end(error)

    def _finish(self) -> None:
        self._parser = None
        self._head = None
        self.sink = None
        self._headers = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _lost(self, eof: bool) -> None:
        if self._parser is None:
            return  # idle, or already settled
        if eof and self._until_close and self._response is not None:
            self._complete()  # a body that ends with the connection has ended
            return
        self._fail(ProtocolError("upstream closed the connection", self._answered))

    def _closed(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_closed(self)

    def _check_read(self) -> None:
        self._timer = None
        if self._parser is None:
            return
        due = self._last_read + self._read_timeout
        if self._paused or due > self.loop.time():
            self._timer = self.loop.call_at(
                self.loop.time() + self._read_timeout if self._paused else due, self._check_read
            )
            return
        self._fail(TimeoutError("upstream silent past the read timeout"))


def _framing(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the body is chunked. A transfer coding the proxy does not decode is refused
    (RFC 9112 §6.1), never passed on as something else: one Transfer-Encoding line saying
    exactly `chunked`, or none (as nginx's ngx_http_upstream_process_transfer_encoding and
    Envoy's HTTP/1 codec accept; `gzip, chunked` would hand the client gzip bytes with no
    Content-Encoding, `chunked, gzip` or `xchunked` leave the length unknown)."""
    codings = [value for name, value in headers if name.lower() == b"transfer-encoding"]
    if not codings:
        return False
    if len(codings) > 1 or codings[0].strip().lower() != _CHUNKED:
        raise ProtocolError("transfer coding other than chunked", True)
    return True


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A failure nobody awaits (the client left first) is not an unretrieved error."""
    if not future.cancelled():
        future.exception()
