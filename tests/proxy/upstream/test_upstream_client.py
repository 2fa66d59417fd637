"""The proxy's own HTTP/1.1 client (upstream/connection.py, upstream/pool.py) against
loopback servers that script raw bytes.

The proxy's end-to-end tests see this client only through what a client of the proxy gets
back; here each HTTP/1.1 rule it must keep is checked on the wire: what it writes, how it
frames a body, when it reuses a connection, what it retries, and what it calls a failure.
The servers run in the test's own event loop (uvloop, as the proxy's), so a test can act
between two of their writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop

from latency_proxy.base.config import Route
from latency_proxy.upstream import connection as upstream_connection
from latency_proxy.upstream import pool as upstream_pool
from latency_proxy.upstream.connection import (
    MAX_HEAD_BYTES,
    ConnectError,
    ProtocolError,
    Response,
)
from latency_proxy.upstream.pool import Attempt, Origin, Pool, Timeouts
from loadgen.stack.processes import free_port
from tests.support.raw_upstream import RawRequest, response
from tests.support.timing import on_time, wall_clock

T = TypeVar("T")
READ_TIMEOUT = 0.3  # the timing tests' read timeout: short, so they stay fast
PATIENCE = 5.0  # how long a test waits for what must happen before calling it a failure


def run(main: Coroutine[Any, Any, T]) -> T:
    return uvloop.run(main)


class Peer:
    """One accepted connection as the server sees it; its requests are recorded in order."""

    def __init__(
        self,
        number: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        requests: list[RawRequest],
    ) -> None:
        self.number = number
        self.reader = reader
        self.writer = writer
        self._requests = requests
        self._served = 0
        self.ended = asyncio.Event()  # the client closed its side

    async def request(self) -> RawRequest | None:
        """The next request (head and Content-Length body), None once the client closed."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.ended.set()
            return None
        request = RawRequest(self.number, self._served, head[:-4], b"")
        length = request.header(b"content-length")
        if length:
            request = dataclasses.replace(request, body=await self.reader.readexactly(int(length)))
        self._served += 1
        self._requests.append(request)
        return request

    async def send(self, *parts: bytes) -> None:
        for part in parts:
            self.writer.write(part)
            await self.writer.drain()

    async def until_closed(self) -> None:
        """Read on until the client closes (requests still arriving are recorded)."""
        while await self.request() is not None:
            pass


Handler = Callable[[Peer], Awaitable[None]]


class Upstream:
    """A loopback server in the test's loop: `handler` runs once per accepted connection."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.peers: list[Peer] = []
        self.requests: list[RawRequest] = []
        self._scripts: list[asyncio.Future[None]] = []
        self._pools: list[Pool] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    def pool(
        self,
        path: str = "",
        limit: int = 4,
        connect_timeout: float = PATIENCE,
        read_timeout: float = PATIENCE,
        keepalive: float = PATIENCE,
    ) -> Pool:
        timeouts = Timeouts(connect_timeout, read_timeout, keepalive)
        pool = Pool(Origin.of(Route("t", self.url + path), None), limit, timeouts)
        self._pools.append(pool)
        return pool

    async def __aenter__(self) -> Upstream:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for pool in self._pools:
            pool.close()
        assert self._server is not None
        self._server.close()
        for script in self._scripts:
            script.cancel()
        results = await asyncio.gather(*self._scripts, return_exceptions=True)
        failures = [
            r for r in results if isinstance(r, Exception) and not isinstance(r, ConnectionError)
        ]
        if failures and not exc[0]:
            raise failures[0]  # a script that broke is the test's failure, not a silent log

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(len(self.peers), reader, writer, self.requests)
        self.peers.append(peer)
        script = asyncio.ensure_future(self._handler(peer))
        self._scripts.append(script)
        await asyncio.wait([script])  # its failure is reported at the exit, not logged here
        writer.close()


def answering(*replies: bytes) -> Handler:
    """Answer the n-th request on each connection with the n-th reply (the last repeats),
    keeping the connection open until the client closes it."""

    async def handler(peer: Peer) -> None:
        served = 0
        while await peer.request() is not None:
            await peer.send(replies[min(served, len(replies) - 1)])
            served += 1

    return handler


async def hang_up(peer: Peer) -> None:
    """End a script by closing the connection (Upstream closes it when the handler returns)."""


def scripted(*steps: bytes | asyncio.Event, then: Handler = Peer.until_closed) -> Handler:
    """Read the request, then send each bytes step and wait for each Event step in turn;
    then `then`: read on until the client closes (by default), hang up, or answer on."""

    async def handler(peer: Peer) -> None:
        await peer.request()
        for step in steps:
            await (step.wait() if isinstance(step, asyncio.Event) else peer.send(step))
        await then(peer)

    return handler


def on_the_first(handler: Handler) -> Handler:
    """`handler` on the first connection; every later one answers OK."""

    async def first_or_ok(peer: Peer) -> None:
        await (handler if peer.number == 0 else answering(OK))(peer)

    return first_or_ok


class Body:
    """A sink that keeps what it is handed, and an event for the first chunk."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.arrived = asyncio.Event()

    def __call__(self, t: float, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.arrived.set()

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def exchange(
    pool: Pool,
    method: bytes = b"GET",
    target: bytes = b"/",
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    attempt: Attempt | None = None,
) -> tuple[Response, bytes]:
    """One whole request: the response and its complete body."""
    answer = await pool.request(method, target, headers or [], body, attempt or Attempt())
    sink = Body()
    answer.stream(sink)
    assert await asyncio.wait_for(answer.done, PATIENCE) is None
    return answer, sink.data


async def begun(pool: Pool) -> tuple[Response, Body]:
    """A GET's response whose body has begun: the sink holds its first chunk."""
    answer = await pool.request(b"GET", b"/", [], b"", Attempt())
    sink = Body()
    answer.stream(sink)
    await asyncio.wait_for(sink.arrived.wait(), PATIENCE)
    return answer, sink


async def until(condition: Callable[[], bool]) -> None:
    """Poll for a state that must come (a test fails if it does not within PATIENCE)."""
    async with asyncio.timeout(PATIENCE):
        while not condition():
            await asyncio.sleep(0.005)


OK = response(b"ok")


# 1. the request on the wire


def test_the_request_is_written_byte_for_byte() -> None:
    target = b"/v1/a%2e%2e/%2F/%3F?q=%41"
    headers = [(b"x-name", b"caf\xc3\xa9"), (b"X-Mixed-Case", b"a, b;c"), (b"x-empty", b"")]

    async def main() -> None:
        async with Upstream(answering(OK)) as upstream:
            pool = upstream.pool("/base/")
            await exchange(pool, b"POST", target, b'{"n":1}', headers)
            await exchange(pool, b"POST", target, b"", headers)
            await exchange(pool, b"GET", target, b"", headers)
            host = upstream.url.removeprefix("http://").encode()
            start = b" /base%s HTTP/1.1\r\nhost: %s\r\n" % (target, host)
            lines = b"x-name: caf\xc3\xa9\r\nX-Mixed-Case: a, b;c\r\nx-empty: \r\n"
            assert [r.head + b"\r\n\r\n" + r.body for r in upstream.requests] == [
                b"POST" + start + lines + b'content-length: 7\r\n\r\n{"n":1}',
                b"POST" + start + lines + b"content-length: 0\r\n\r\n",
                b"GET" + start + lines + b"\r\n",
            ]

    run(main())


# 2. keep-alive


def test_sequential_requests_share_one_connection() -> None:
    async def main() -> None:
        async with Upstream(answering(response(b"one"), response(b"two"))) as upstream:
            pool = upstream.pool()
            first, second = Attempt(), Attempt()
            assert (await exchange(pool, attempt=first))[1] == b"one"
            assert (await exchange(pool, attempt=second))[1] == b"two"
            assert len(upstream.peers) == 1
            assert [(r.connection, r.index) for r in upstream.requests] == [(0, 0), (0, 1)]
            assert (first.reused, second.reused) == (False, True)

    run(main())


@pytest.mark.parametrize(
    "reply",
    [
        response(b"ok", b"connection: close"),
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    ],
    ids=["connection-close", "http-1.0"],
)
def test_a_response_that_ends_the_connection_is_not_reused(reply: bytes) -> None:
    async def main() -> None:
        async with Upstream(answering(reply)) as upstream:  # it would keep serving
            pool = upstream.pool()
            assert (await exchange(pool))[1] == b"ok"
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)  # client closed
            again = Attempt()
            assert (await exchange(pool, attempt=again))[1] == b"ok"
            assert [(r.connection, r.index) for r in upstream.requests] == [(0, 0), (1, 0)]
            assert not again.reused

    run(main())


# 3. bodies


async def reused_after(*parts: bytes, method: bytes = b"GET") -> tuple[Response, bytes]:
    """The response to one request, scripted as `parts` written one at a time (a client may
    read them apart); a GET after it must get its answer on the same connection."""

    async with Upstream(scripted(*parts, then=answering(OK))) as upstream:
        pool = upstream.pool()
        answer, body = await exchange(pool, method, body=b"x" if method == b"POST" else b"")
        follow = Attempt()
        assert (await exchange(pool, attempt=follow))[1] == b"ok"
        assert follow.reused and len(upstream.peers) == 1
    return answer, body


CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
LENGTH_5000 = b"content-length: 5000\r\n\r\n"


@pytest.mark.parametrize(
    ("parts", "method", "status", "headers", "body"),
    [
        pytest.param(
            (CHUNKED + b"5\r\nhello\r\n", b"7\r\n, world\r\n", b"1;e=1\r\n!\r\n0\r\nt: 1\r\n\r\n"),
            b"GET", 200, [(b"transfer-encoding", b"chunked")], b"hello, world!",
            id="chunked, with an extension and a trailer",
        ),
        pytest.param(
            (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhel", b"lo ", b"world"),
            b"GET", 200, [(b"Content-Length", b"11")], b"hello world",
            id="content-length, arriving in pieces",
        ),
        pytest.param(
            (b"HTTP/1.1 200 OK\r\n" + LENGTH_5000,), b"HEAD", 200,
            [(b"content-length", b"5000")], b"", id="HEAD: no body whatever its length says",
        ),
        pytest.param(
            (b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n",), b"GET", 204, [(b"x-a", b"1")], b"",
            id="204: no body",
        ),
        pytest.param(
            (b"HTTP/1.1 304 Not Modified\r\n" + LENGTH_5000,), b"GET", 304,
            [(b"content-length", b"5000")], b"", id="304: no body whatever its length says",
        ),
        pytest.param(
            (
                b"HTTP/1.1 100 Continue\r\n\r\n",
                b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nx-final: yes\r\ncontent-length: 4\r\n\r\nbody",
            ),
            b"POST", 200, [(b"x-final", b"yes"), (b"content-length", b"4")], b"body",
            id="interim answers skipped",
        ),
    ],
)  # fmt: skip
def test_a_body_is_handed_over_exactly_and_its_connection_serves_the_next_request(
    parts: tuple[bytes, ...],
    method: bytes,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> None:
    answer, received = run(reused_after(*parts, method=method))
    assert (answer.status, answer.raw_headers, received) == (status, headers, body)
    assert all(answer.header(name.lower()) == value for name, value in headers)


def test_a_body_without_length_ends_when_the_server_closes() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n"
    handler = on_the_first(scripted(head + b"part1", b"part2", then=hang_up))  # the close ends it

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool()
            answer, body = await exchange(pool)  # asserts done resolved None
            assert (answer.status, body) == (200, b"part1part2")
            again = Attempt()
            assert (await exchange(pool, attempt=again))[1] == b"ok"
            assert len(upstream.peers) == 2 and not again.reused

    run(main())


# 4. failures


def test_a_body_cut_short_by_a_close_is_a_protocol_error() -> None:
    handler = scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", then=hang_up)

    async def main() -> None:
        async with Upstream(handler) as upstream:
            answer, sink = await begun(upstream.pool())
            with pytest.raises(ProtocolError) as caught:
                await asyncio.wait_for(answer.done, PATIENCE)
            assert caught.value.answered and sink.data == b"abc"

    run(main())


def test_invalid_chunk_framing_fails_at_once() -> None:
    bad = asyncio.Event()
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    handler = scripted(head + b"5\r\nhello\r\n", bad, b"zz\r\n")

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=30.0)
            answer, sink = await begun(pool)
            bad.set()
            with pytest.raises(ProtocolError):
                await asyncio.wait_for(answer.done, PATIENCE)  # long before the read timeout
            assert sink.data == b"hello"
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)  # not kept

    run(main())


def padded_head(size: int, end: bytes) -> bytes:
    """A response head of `size` bytes in header lines of about 1 KB, then `end`."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
    lines = []
    while len(head) + sum(map(len, lines)) < size:
        lines.append(b"x-pad-%05d: %s\r\n" % (len(lines), b"p" * 1000))
    return head + b"".join(lines) + end


def test_a_head_that_does_not_end_within_the_limit_is_refused() -> None:
    handler = scripted(padded_head(MAX_HEAD_BYTES + 4096, b""))  # and no blank line yet

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=30.0)
            with pytest.raises(ProtocolError) as caught:
                await asyncio.wait_for(pool.request(b"GET", b"/", [], b"", Attempt()), PATIENCE)
            assert caught.value.answered

    run(main())


def test_a_head_just_under_the_limit_is_accepted() -> None:
    head = padded_head(MAX_HEAD_BYTES - 2048, b"\r\nok")

    async def main() -> None:
        async with Upstream(answering(head)) as upstream:
            answer, body = await exchange(upstream.pool())
            padding = [name for name, _ in answer.raw_headers if name.startswith(b"x-pad-")]
            assert (answer.status, len(padding), body) == (200, head.count(b"x-pad-"), b"ok")

    run(main())


def test_a_complete_head_over_the_limit_is_refused() -> None:
    head = padded_head(MAX_HEAD_BYTES + 4096, b"\r\nok")

    async def main() -> None:
        async with Upstream(answering(head)) as upstream:
            with pytest.raises(ProtocolError):
                await exchange(upstream.pool())

    run(main())


def test_a_refused_connection_is_a_connect_error_and_frees_its_slot() -> None:
    async def main() -> None:
        origin = Origin.of(Route("t", f"http://127.0.0.1:{free_port()}"), None)
        pool = Pool(origin, 1, Timeouts(PATIENCE, PATIENCE, PATIENCE))
        for _ in range(2):  # the second would wait for the slot if the first kept it
            attempt = Attempt()
            with pytest.raises(ConnectError):
                await pool.request(b"GET", b"/", [], b"", attempt)
            assert not attempt.waiting

    run(main())


@wall_clock
def test_a_silent_upstream_times_out_after_the_read_timeout() -> None:
    async def main() -> None:
        async with Upstream(scripted()) as upstream:  # it never answers
            pool = upstream.pool(read_timeout=READ_TIMEOUT)
            start = time.perf_counter()
            with pytest.raises(TimeoutError):
                await pool.request(b"GET", b"/", [], b"", Attempt())
            assert on_time(time.perf_counter() - start, READ_TIMEOUT)
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)  # and closed

    run(main())


@wall_clock
def test_a_steady_trickle_is_not_timed_out() -> None:
    gap, count = 0.1, 7  # 0.7 s in all, every gap well inside the 0.3 s read timeout

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % count)
        for _ in range(count):
            await asyncio.sleep(gap)
            await peer.send(b"x")
        await peer.until_closed()

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=READ_TIMEOUT)
            start = time.perf_counter()
            _, body = await exchange(pool)
            assert body == b"x" * count
            assert time.perf_counter() - start >= gap * count - 0.005  # it did trickle

    run(main())


@wall_clock
def test_no_read_timeout_while_reading_is_paused() -> None:
    handler = scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab")  # then silent

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=READ_TIMEOUT)
            answer, sink = await begun(pool)
            answer.pause_reading()
            await asyncio.sleep(3 * READ_TIMEOUT)  # the silence under test, three timeouts long
            assert not answer.done.done()
            answer.resume_reading()
            resumed = time.perf_counter()
            with pytest.raises(TimeoutError):  # the silence counts again, from the resume
                await asyncio.wait_for(answer.done, PATIENCE)
            assert on_time(time.perf_counter() - resumed, READ_TIMEOUT)
            assert sink.data == b"ab"

    run(main())


def test_a_connection_paused_as_its_body_completes_serves_the_next_request() -> None:
    streaming = asyncio.Event()
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    # the whole body in one read, after stream()
    handler = scripted(head, streaming, b"hello", then=answering(OK))

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=READ_TIMEOUT)
            answer = await pool.request(b"GET", b"/", [], b"", Attempt())
            sink = Body()

            def slow_client(t: float, chunk: bytes) -> None:
                sink(t, chunk)
                answer.pause_reading()  # the client's buffer filled on this chunk

            answer.stream(slow_client)
            streaming.set()
            assert await asyncio.wait_for(answer.done, PATIENCE) is None
            answer.resume_reading()  # the client drained
            assert sink.data == b"hello"
            async with asyncio.timeout(10 * READ_TIMEOUT):  # an answer; a hang fails here
                assert (await exchange(pool))[1] == b"ok"

    run(main())


# 5. the retry


def test_a_connection_closed_while_idle_is_noticed_before_reuse() -> None:
    async def main() -> None:
        async with Upstream(answering(OK)) as upstream:
            pool = upstream.pool()
            await exchange(pool)
            # the upstream ends the idle connection (its FIN goes out now, not at the next
            # loop turn) and the POST follows with no await: the loop has not read the end,
            # only the check as the connection leaves the pool can see it
            fd = upstream.peers[0].writer.get_extra_info("socket").fileno()
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            attempt = Attempt()
            answer, body = await exchange(pool, b"POST", b"/p", b'{"n":2}', attempt=attempt)
            assert (answer.status, body) == (200, b"ok")
            assert not attempt.reused and not attempt.not_retried
            posts = [(r.connection, r.index) for r in upstream.requests if r.body == b'{"n":2}']
            assert posts == [(1, 0)]  # once, on a fresh connection

    run(main())


@contextlib.asynccontextmanager
async def dropped_after_reading_the_second_request() -> AsyncIterator[tuple[Upstream, Pool]]:
    """A pool whose connection has served one request; the upstream reads the next one
    whole and closes without a word (a crash, a restart, its own idle timer firing just
    then). Later connections answer OK."""

    async def read_and_drop(peer: Peer) -> None:
        await peer.request()

    async with Upstream(on_the_first(scripted(OK, then=read_and_drop))) as upstream:
        pool = upstream.pool()
        await exchange(pool)
        yield upstream, pool


@pytest.mark.parametrize("method", [b"POST", b"PATCH"])
def test_a_request_that_went_out_is_never_sent_again_unless_idempotent(method: bytes) -> None:
    async def main() -> None:
        async with dropped_after_reading_the_second_request() as (upstream, pool):
            attempt = Attempt()
            with pytest.raises(ProtocolError) as caught:
                await pool.request(method, b"/p", [], b'{"n":2}', attempt)
            assert not caught.value.answered and caught.value.sent
            assert attempt.reused and attempt.not_retried
            assert [r.body for r in upstream.requests] == [b"", b'{"n":2}']  # once
            assert len(upstream.peers) == 1

    run(main())


@pytest.mark.parametrize("method", sorted(upstream_pool.IDEMPOTENT))
def test_an_idempotent_request_that_went_out_unanswered_is_sent_again(method: bytes) -> None:
    async def main() -> None:
        async with dropped_after_reading_the_second_request() as (upstream, pool):
            attempt = Attempt()
            answer, _ = await exchange(pool, method, b"/again", attempt=attempt)
            assert answer.status == 200 and attempt.reused and not attempt.not_retried
            again = [(r.connection, r.index) for r in upstream.requests if r.target == b"/again"]
            assert again == [(0, 1), (1, 0)]

    run(main())


def test_a_post_found_dead_before_any_of_it_went_out_is_sent_on_a_fresh_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        async with Upstream(answering(OK)) as upstream:
            pool = upstream.pool()
            await exchange(pool)
            # closing, its end not yet seen by the pool's check: the write finds it closing
            (idle,) = pool._idle
            idle.transport.close()
            # the pool's one poll (Connection.readable) sees nothing yet
            monkeypatch.setattr(upstream_connection.select, "select", lambda *_: ([], [], []))
            attempt = Attempt()
            _, body = await exchange(pool, b"POST", b"/p", b"x", attempt=attempt)
            assert body == b"ok" and attempt.reused and not attempt.not_retried
            assert [(r.connection, r.body) for r in upstream.requests] == [(0, b""), (1, b"x")]

    run(main())


def test_a_request_answered_in_part_is_not_sent_again() -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(OK)
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-len")  # then the close

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool()
            await exchange(pool)
            with pytest.raises(ProtocolError) as caught:
                await pool.request(b"POST", b"/p", [], b'{"n":2}', Attempt())
            assert caught.value.answered
            assert [r.body for r in upstream.requests] == [b"", b'{"n":2}']
            assert len(upstream.peers) == 1

    run(main())


def test_a_fresh_connection_that_fails_unanswered_is_not_sent_again() -> None:
    async def main() -> None:
        async with Upstream(scripted(then=hang_up)) as upstream:  # no answer
            with pytest.raises(ProtocolError) as caught:
                await upstream.pool().request(b"POST", b"/p", [], b"x", Attempt())
            assert not caught.value.answered
            assert len(upstream.requests) == 1 and len(upstream.peers) == 1

    run(main())


# 6. the pool's limit and idle expiry


def held_first_response(release: asyncio.Event) -> Handler:
    """The first response on the first connection stops halfway until `release` is set."""

    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
    return on_the_first(scripted(head + b"a", release, b"b", then=answering(OK)))


def test_at_the_limit_a_request_waits_for_the_connection_in_use() -> None:
    async def main() -> None:
        release = asyncio.Event()
        async with Upstream(held_first_response(release)) as upstream:
            pool = upstream.pool(limit=1)
            first = await pool.request(b"GET", b"/1", [], b"", Attempt())
            sink = Body()
            first.stream(sink)
            attempt = Attempt()
            second = asyncio.create_task(exchange(pool, target=b"/2", attempt=attempt))
            await until(lambda: attempt.waiting)
            assert not second.done() and len(upstream.peers) == 1
            release.set()
            await asyncio.wait_for(first.done, PATIENCE)
            _, body = await second
            assert (sink.data, body) == (b"ab", b"ok")
            assert (attempt.waiting, attempt.reused) == (False, True)
            assert [(r.connection, r.target) for r in upstream.requests] == [(0, b"/1"), (0, b"/2")]

    run(main())


@wall_clock
def test_at_the_limit_a_wait_past_the_connect_timeout_is_a_timeout_while_waiting() -> None:
    connect_timeout = 0.2

    async def main() -> None:
        release = asyncio.Event()
        async with Upstream(held_first_response(release)) as upstream:
            pool = upstream.pool(limit=1, connect_timeout=connect_timeout)
            first = await pool.request(b"GET", b"/1", [], b"", Attempt())
            attempt = Attempt()
            start = time.perf_counter()
            with pytest.raises(TimeoutError):
                await pool.request(b"GET", b"/2", [], b"", attempt)
            assert on_time(time.perf_counter() - start, connect_timeout)
            assert attempt.waiting  # the proxy's own queue, not the upstream
            release.set()
            await asyncio.wait_for(first.done, PATIENCE)
            assert (await exchange(pool))[1] == b"ok"  # the slot was not lost
            assert [r.target for r in upstream.requests] == [b"/1", b"/"]

    run(main())


def test_a_connection_idle_past_the_keepalive_is_closed_not_reused() -> None:
    expiry = 0.05

    async def main() -> None:
        async with Upstream(answering(OK)) as upstream:
            pool = upstream.pool(keepalive=expiry)
            await exchange(pool)
            await asyncio.sleep(3 * expiry)  # the idleness under test
            attempt = Attempt()
            assert (await exchange(pool, attempt=attempt))[1] == b"ok"
            assert not attempt.reused and len(upstream.peers) == 2
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)  # closed

    run(main())


# 7. abandoning a body


def test_closing_an_unfinished_response_closes_its_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    handler = on_the_first(scripted(head + b"3\r\nabc\r\n"))

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(limit=1)
            answer, _ = await begun(pool)
            answer.close()
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)  # the server saw EOF
            assert answer.done.done() and isinstance(answer.done.exception(), ProtocolError)
            attempt = Attempt()
            assert (await exchange(pool, attempt=attempt))[1] == b"ok"
            assert not attempt.reused and not attempt.waiting and len(upstream.peers) == 2

    run(main())


# found in review: what only a clean end of the connection may end, and what survives it


def test_a_body_without_length_cut_by_a_reset_is_a_protocol_error() -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart1")
        sock = peer.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.writer.transport.abort()  # RST, not FIN: the body did not end

    async def main() -> None:
        async with Upstream(handler) as upstream:
            answer, sink = await begun(upstream.pool())
            with pytest.raises(ProtocolError):
                await asyncio.wait_for(answer.done, PATIENCE)
            assert sink.data == b"part1"

    run(main())


def test_closing_the_pool_fails_a_body_without_length_still_arriving() -> None:
    handler = scripted(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart1")

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool()
            answer, _ = await begun(pool)
            pool.close()  # the proxy shutting down: the body is cut, not complete
            with pytest.raises(ProtocolError):
                await asyncio.wait_for(answer.done, PATIENCE)

    run(main())


def test_bytes_after_a_response_end_its_connection() -> None:
    stray = b"HTTP/1.1 200 OK\r\nx-stray: 1\r\n"  # a head nobody asked for, in the same write

    handler = on_the_first(scripted(OK + stray))

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool()
            assert (await exchange(pool))[1] == b"ok"
            await asyncio.wait_for(upstream.peers[0].ended.wait(), PATIENCE)
            attempt = Attempt()
            answer, body = await exchange(pool, attempt=attempt)
            assert (body, answer.header(b"x-stray")) == (b"ok", None)
            assert not attempt.reused and len(upstream.peers) == 2

    run(main())


def test_a_body_held_before_the_sink_is_paused_then_handed_over_whole() -> None:
    size = 4 * upstream_connection.HELD_BEFORE_STREAM
    payload = bytes(range(256)) * (size // 256)

    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size
    handler = scripted(head, payload, then=answering(OK))

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool()
            answer = await pool.request(b"GET", b"/", [], b"", Attempt())
            await until(lambda: answer._held > upstream_connection.HELD_BEFORE_STREAM)
            await asyncio.sleep(0.1)  # the upstream has more to send; the proxy reads none
            assert answer._held < 2 * upstream_connection.HELD_BEFORE_STREAM
            sink = Body()
            answer.stream(sink)
            assert await asyncio.wait_for(answer.done, PATIENCE) is None
            assert sink.data == payload
            assert (await exchange(pool))[1] == b"ok"

    run(main())


def test_a_waiter_cancelled_as_a_slot_frees_passes_the_slot_on() -> None:
    handler = on_the_first(scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\na"))

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(limit=1)
            first, _ = await begun(pool)
            early, late = Attempt(), Attempt()
            cancelled = asyncio.create_task(exchange(pool, attempt=early))
            await until(lambda: early.waiting)
            waiting = asyncio.create_task(exchange(pool, attempt=late))
            await until(lambda: late.waiting)
            first.close()  # frees the slot: the first waiter is told ...
            cancelled.cancel()  # ... and goes before it runs
            _, body = await asyncio.wait_for(waiting, PATIENCE)
            assert body == b"ok" and cancelled.cancelled()

    run(main())


# every phase of the upstream connection has a timer, every status family its framing


@wall_clock
def test_a_tls_handshake_that_never_completes_ends_at_the_connect_timeout() -> None:
    connect_timeout = 0.3

    async def handler(peer: Peer) -> None:
        await peer.ended.wait()  # accepts the TCP connection, never speaks TLS

    async def main() -> None:
        async with Upstream(handler) as upstream:
            tls = ssl.create_default_context()
            origin = Origin.of(Route("t", upstream.url.replace("http:", "https:")), tls)
            pool = Pool(origin, 1, Timeouts(connect_timeout, PATIENCE, PATIENCE))
            attempt = Attempt()
            start = time.perf_counter()
            with pytest.raises(TimeoutError):
                await pool.request(b"GET", b"/", [], b"", attempt)
            assert on_time(time.perf_counter() - start, connect_timeout)
            assert not attempt.waiting  # the upstream's fault, not the proxy's queue
            upstream.peers[0].ended.set()

    run(main())


@wall_clock
def test_an_upstream_that_does_not_read_the_request_body_times_out() -> None:
    async def handler(peer: Peer) -> None:
        await peer.ended.wait()  # reads nothing: the 16 MB body fills every buffer

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=READ_TIMEOUT)
            start = time.perf_counter()
            with pytest.raises(TimeoutError):
                await pool.request(b"POST", b"/", [], b"x" * 16 * 2**20, Attempt())
            assert on_time(time.perf_counter() - start, READ_TIMEOUT)
            upstream.peers[0].ended.set()

    run(main())


def test_a_flood_of_interim_answers_hits_the_head_limit() -> None:
    flood = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" * (2 * MAX_HEAD_BYTES // 40)

    handler = scripted(flood)

    async def main() -> None:
        async with Upstream(handler) as upstream:
            pool = upstream.pool(read_timeout=30.0)
            with pytest.raises(ProtocolError):
                await asyncio.wait_for(pool.request(b"GET", b"/", [], b"", Attempt()), PATIENCE)

    run(main())


def test_an_http_1_0_answer_without_length_ends_with_the_connection() -> None:
    head = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\n"
    handler = scripted(head + b"old", b"-style", then=hang_up)

    async def main() -> None:
        async with Upstream(handler) as upstream:
            answer, body = await exchange(upstream.pool())
            assert (answer.status, body) == (200, b"old-style")

    run(main())
