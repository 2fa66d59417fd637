"""A route's pool of upstream connections: at most `limit` open, idle ones reused newest
first, and the one retry a pool owes its callers.

An idle connection is kept for `keepalive` seconds (--upstream-keepalive), below the
upstream's own keep-alive (vLLM's uvicorn closes idle connections after 5 s), so the pool
lets it go before the upstream does. One the upstream closed anyway is dropped as soon as
the loop reads its end, and checked once more as it leaves the pool (`Connection.readable`).
What those checks cannot see: the upstream closes just as a request goes out on a reused
connection (its close and our request cross on the wire), and no answer comes; only a
keep-alive shorter than the upstream's keeps a request out of that instant. Such a request
is sent once more on a fresh connection only when it is safe to (RFC 9110 §9.2.2): when
none of it went out, or when its method is idempotent. A POST that went out is never sent
again (the upstream may have run it: a second generation, a second adapter load); it fails
as `protocol`, and `Attempt.not_retried` says why.

A connection is reused only when its last response was complete and neither side asked to
close; one idle past `keepalive` is closed instead.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from latency_proxy.base.config import Route
from latency_proxy.upstream.connection import (
    ConnectError,
    Connection,
    OutOfFiles,
    ProtocolError,
    Response,
)
from latency_proxy.upstream.fd_limit import EXHAUSTED, EXHAUSTION

# methods sent without a Content-Length when they carry no body (as httpx and aiohttp do)
_BODILESS = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"CONNECT"})
# RFC 9110 §9.2.2: what a proxy may send again on its own when a connection fails
IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})


class Attempt:
    """What the pool did for one request: did it wait for a slot, was its connection used
    before, was a failure left unretried. A timeout while waiting is the proxy's own queue,
    not a slow upstream."""

    __slots__ = ("not_retried", "reused", "waiting")

    def __init__(self) -> None:
        self.waiting = False
        self.reused = False
        self.not_retried = False  # failed unanswered after going out; not idempotent


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route's requests go: host, port, TLS, and the base path they are under."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    host_header: bytes
    base_path: bytes

    @classmethod
    def of(cls, route: Route, tls: ssl.SSLContext | None) -> Origin:
        shown = urlsplit(route.shown_url)
        return cls(
            host=route.host,
            port=route.port,
            tls=tls if shown.scheme == "https" else None,
            host_header=shown.netloc.encode("idna"),
            base_path=shown.path.rstrip("/").encode(),
        )


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a pool waits: to connect, for the upstream's next bytes, and how long an
    idle connection stays for reuse (seconds). Every pool of a proxy has the same."""

    connect: float
    read: float
    keepalive: float


class Pool:
    def __init__(self, origin: Origin, limit: int, timeouts: Timeouts) -> None:
        self.origin = origin
        self._limit = limit
        self._timeouts = timeouts
        self._idle: list[Connection] = []
        self._connections: set[Connection] = set()  # open, idle or busy
        self._open = 0  # connections open or opening: the slots taken
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        self._closing = False

    async def request(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        attempt: Attempt,
    ) -> Response:
        """The response's head; its body follows through `Response.stream`."""
        head = self._head(method, target, headers, body)
        head_only = method == b"HEAD"
        connection = self._reusable(attempt)  # at hand: nothing to wait for, no timer
        if connection is None:
            async with asyncio.timeout(self._timeouts.connect):
                connection = await self._acquire(attempt)
        try:
            return await self._exchange(connection, head, body, head_only)
        except ProtocolError as exc:
            if not connection.reused or exc.answered:
                raise
            if exc.sent and method not in IDEMPOTENT:
                attempt.not_retried = True
                raise
        async with asyncio.timeout(self._timeouts.connect):
            fresh = await self._connect()
        return await self._exchange(fresh, head, body, head_only)

    def _head(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        lines = [
            b"%s %s%s HTTP/1.1\r\nhost: %s\r\n"
            % (method, self.origin.base_path, target, self.origin.host_header)
        ]
        lines.extend(b"%s: %s\r\n" % pair for pair in headers)
        if body or method not in _BODILESS:
            lines.append(b"content-length: %d\r\n" % len(body))
        lines.append(b"\r\n")
        return b"".join(lines)

    async def _exchange(
        self, connection: Connection, head: bytes, body: bytes, head_only: bool
    ) -> Response:
        answer = connection.request(head, body, head_only)
        try:
            return await answer
        except asyncio.CancelledError:
            if answer.done() and not answer.cancelled() and answer.exception() is None:
                answer.result().close()
            else:
                connection.abandon()
            raise

    def _reusable(self, attempt: Attempt) -> Connection | None:
        """The newest idle connection still fit to reuse (the unfit ones closed), or None."""
        now = asyncio.get_running_loop().time()
        while self._idle:
            connection = self._idle.pop()
            if (
                not connection.closed
                and now - connection.idle_since < self._timeouts.keepalive
                and not connection.readable()
            ):
                connection.reused = attempt.reused = True
                return connection
            connection.close()
        return None

    async def _acquire(self, attempt: Attempt) -> Connection:
        loop = asyncio.get_running_loop()
        while True:
            connection = self._reusable(attempt)
            if connection is not None:
                return connection
            if self._open < self._limit:
                return await self._connect()
            waiter: asyncio.Future[Connection | None] = loop.create_future()
            self._waiters.append(waiter)
            attempt.waiting = True
            try:
                handed = await waiter
            except asyncio.CancelledError:  # the wait ran out: `waiting` stays true
                if waiter.done() and not waiter.cancelled():  # handed over just then: pass it on
                    handed = waiter.result()
                    if handed is not None:
                        self._idled(handed)
                    else:
                        self._wake()
                raise
            attempt.waiting = False
            if handed is not None:
                handed.reused = attempt.reused = True
                return handed

    async def _connect(self) -> Connection:
        """A new connection in a slot of its own (the retry's may exceed the limit by one)."""
        loop = asyncio.get_running_loop()
        self._open += 1
        origin = self.origin
        try:
            _, connection = await loop.create_connection(
                lambda: Connection(loop, self._timeouts.read, self._idled, self._forget),
                origin.host,
                origin.port,
                ssl=origin.tls,
                server_hostname=origin.host if origin.tls is not None else None,
            )
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            self._slot_freed()
            if exc.errno in EXHAUSTED:
                EXHAUSTION.ran_out(exc.errno)
                raise OutOfFiles(f"no file descriptor for a connection: {exc.strerror}") from None
            raise ConnectError(f"cannot connect to {origin.host}:{origin.port}: {exc}") from None
        except BaseException:
            self._slot_freed()
            raise
        self._connections.add(connection)
        return connection

    def _idled(self, connection: Connection) -> None:
        if self._closing or connection.closed:
            connection.close()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append(connection)

    def _forget(self, connection: Connection) -> None:
        """A connection closed (by either side): its slot is free."""
        if connection not in self._connections:
            return  # never handed out (its connect was cancelled): _connect freed the slot
        self._connections.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)
        self._slot_freed()

    def _slot_freed(self) -> None:
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        """Tell the longest waiter a slot is free."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # a slot: it opens a connection of its own
                return

    def close(self) -> None:
        """Close every connection: a response still being read ends as cut (`protocol`)."""
        self._closing = True
        for connection in list(self._connections):
            connection.close()
