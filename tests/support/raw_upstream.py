"""An upstream that answers with exact bytes: the broken servers a real one will not be.

The scripted simulator speaks correct HTTP whatever it is told; a proxy must also survive an
upstream that breaks the framing, sends less than it declared, or closes a kept-alive
connection just as a request arrives on it. `RawUpstream` runs an asyncio server on a
loopback port in a background thread, reads each request (head and Content-Length body),
records it byte for byte with the connection it came on, and writes whatever `respond`
returns for it. The proxy's own listings (GET …/v1/models, on connections of their own)
are answered 404 and neither numbered nor recorded, so what a test counts is what it sent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.stack.processes import free_port


def _listing(head: bytes) -> bool:
    method, target, _ = head.split(b" ", 2)
    return method == b"GET" and target.endswith(b"/v1/models")


@dataclass(frozen=True, slots=True)
class RawRequest:
    connection: int  # accepted connections are numbered from 0
    index: int  # requests on this connection, from 0
    head: bytes  # request line and headers, as received, up to the blank line
    body: bytes

    @property
    def target(self) -> bytes:
        """The request target as sent (path and query, undecoded)."""
        return self.head.split(b" ", 2)[1]

    def header(self, name: bytes) -> bytes | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name:
                return value.strip()
        return None


@dataclass(frozen=True, slots=True)
class Reply:
    """Bytes to write, `later` parts each `gap` seconds after the one before (so a client
    reads them apart); then close the connection (`close`), or keep serving it."""

    data: bytes = b""
    close: bool = False
    later: tuple[bytes, ...] = ()
    gap: float = 0.05


Respond = Callable[[RawRequest], Reply]


class RawUpstream:
    def __init__(self, respond: Respond) -> None:
        self._respond = respond
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[RawRequest] = []
        self._connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("raw upstream did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._started.set()
        await self._stop.wait()
        server.close()  # asyncio.run then cancels the connections still served

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = None  # numbered at its first request that is not a listing
        index = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                if _listing(head):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                if connection is None:
                    connection = self._connections
                    self._connections += 1
                request = RawRequest(connection, index, head[:-4], b"")
                length = request.header(b"content-length")
                body = await reader.readexactly(int(length)) if length else b""
                request = RawRequest(connection, index, head[:-4], body)
                self.requests.append(request)
                index += 1
                reply = self._respond(request)
                writer.write(reply.data)
                await writer.drain()
                for part in reply.later:
                    await asyncio.sleep(reply.gap)
                    writer.write(part)
                    await writer.drain()
                if reply.close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


def response(body: bytes = b"ok", *headers: bytes, status: bytes = b"200 OK") -> bytes:
    """A complete HTTP/1.1 response with a Content-Length (more header lines may follow)."""
    lines = [b"HTTP/1.1 " + status, b"content-length: %d" % len(body), *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
