"""How a relayed body reaches the client: written straight onto uvicorn's transport from
the upstream's data callback (ClientWriter), or, under any other ASGI server, as ASGI
messages from a task of its own (AsgiWriter): slower, but the same bytes.

Both tell the relay when the client's buffer is full (the relay then pauses the upstream,
relay.Backpressure) and call `on_writable` once it drained.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from latency_proxy.base.asgi import Scope, Send
from latency_proxy.server.uvicorn_internals import RequestResponseCycle

ABORT = "latency_proxy.abort"  # the scope extension abort_connection calls
WRITER = "latency_proxy.writer"  # the scope extension client_writer returns
ASGI_HIGH_WATER = 64 * 1024  # bytes waiting for an ASGI send before the upstream pauses


class ClientWriter:
    """A response body written onto the client's transport, framed as uvicorn frames it,
    from inside the upstream's data callback: no ASGI send (a coroutine, and a task
    wake-up) per chunk. The response head and its end still go through ASGI `send`."""

    __slots__ = ("_chunked", "_cycle", "_raw", "_transport", "on_writable")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._chunked = bool(cycle.chunked_encoding)  # unless HEAD, 204, 304 or HTTP/1.0
        self._raw = getattr(cycle, "close_delimited", False)  # HTTP/1.0: http10.py
        self.on_writable: Callable[[], None] | None = None

    def write(self, body: bytes) -> bool:
        """Write a body chunk; True when the client's write buffer is now over uvicorn's
        high-water mark (the caller stops reading until `on_writable`)."""
        cycle = self._cycle
        if cycle.disconnected or cycle.response_complete or not cycle.response_started:
            return False
        if self._chunked:
            self._transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        elif self._raw:
            self._transport.write(body)
        return cycle.flow.write_paused

    async def drain(self) -> None:
        """Nothing waits: every chunk was written when it came."""

    def close(self) -> None:
        self.on_writable = None


class AsgiWriter:
    """A response body as `http.response.body` messages: what arrives while a send is
    pending goes out in the next one; past ASGI_HIGH_WATER bytes waiting, the buffer
    counts as full until they are sent."""

    __slots__ = ("_parts", "_send", "_size", "_task", "on_writable")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._parts: list[bytes] = []
        self._size = 0
        self._task: asyncio.Task[None] | None = None
        self.on_writable: Callable[[], None] | None = None

    def write(self, body: bytes) -> bool:
        self._parts.append(body)
        self._size += len(body)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._pump())
        return self._size > ASGI_HIGH_WATER

    async def _pump(self) -> None:
        while self._parts:
            body = b"".join(self._parts)
            full = self._size > ASGI_HIGH_WATER
            self._parts.clear()
            self._size = 0
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
            if full and self.on_writable is not None:
                self.on_writable()
        self._task = None

    async def drain(self) -> None:
        """Wait until everything written so far was sent."""
        if self._task is not None:
            await self._task

    def close(self) -> None:
        """The relay ended: what was not sent is dropped (the response is being cut)."""
        self.on_writable = None
        if self._task is not None:
            self._task.cancel()
            self._task = None


BodyWriter = ClientWriter | AsgiWriter


def client_writer(scope: Scope, send: Send) -> BodyWriter:
    """The writer for this request's response body, once its head is sent."""
    make = scope.get("extensions", {}).get(WRITER)
    return make() if make is not None else AsgiWriter(send)


def abort_connection(scope: Scope, flush: bool = True) -> None:
    """Close the client's connection without completing the response: after what was
    written went out (`flush`), or at once (a client that stopped reading). Under a server
    without the extension, returning without the final body message ends it too."""
    abort = scope.get("extensions", {}).get(ABORT)
    if abort is not None:
        abort(flush)
