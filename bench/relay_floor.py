"""The Python floor for a pass-through: a raw TCP relay on uvloop, optionally metering.

Each accepted connection gets its own upstream connection; bytes are piped both ways as they
arrive (asyncio Protocols, TCP_NODELAY on both sockets, no HTTP work, no buffering beyond the
transports'). With `--meter` the relay also does what the proxy's data plane must do per
read: httptools takes the response's framing off (C, one call per read), then every body
piece goes through `SSEParser.feed` and every event through `StreamMeter.on_event`, with a
fresh parser and meter per response. bench/proxy_overhead.py runs both beside nginx and the
proxy, so a run shows what Python costs and what parsing + metering add on top.

    python bench/relay_floor.py --upstream-port 8000 --port 8100 [--meter]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

import httptools
import uvloop
from servers import add_address_flags, serve  # bench/, beside this script

from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser


def _no_delay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ResponseMeter:
    """httptools callbacks: the response body, de-framed, through the parser and the meter."""

    __slots__ = ("meter", "parser")

    def __init__(self) -> None:
        self.parser = SSEParser()
        self.meter = StreamMeter(time.monotonic())

    def on_message_begin(self) -> None:
        self.parser = SSEParser()
        self.meter = StreamMeter(time.monotonic())

    def on_body(self, body: bytes) -> None:
        t = time.monotonic()
        on_event = self.meter.on_event
        for event in self.parser.feed(body):
            on_event(t, event)

    def on_message_complete(self) -> None:
        self.meter.finish(time.monotonic())


class UpstreamSide(asyncio.Protocol):
    """The relay's connection to the upstream: what arrives goes to the client at once."""

    def __init__(self, client: asyncio.Transport, meter: bool) -> None:
        self.client = client
        self.http = httptools.HttpResponseParser(ResponseMeter()) if meter else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _no_delay(transport)

    def data_received(self, data: bytes) -> None:
        self.client.write(data)
        if self.http is not None:
            self.http.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class ClientSide(asyncio.Protocol):
    """One accepted connection; bytes that arrive before the upstream is connected wait."""

    def __init__(self, upstream: tuple[str, int], meter: bool) -> None:
        self.upstream_address = upstream
        self.meter = meter
        self.upstream: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        _no_delay(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(
                lambda: UpstreamSide(self.transport, self.meter), *self.upstream_address
            )
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            upstream.close()
            return
        upstream.write(b"".join(self.early))
        self.early.clear()
        self.upstream = upstream

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_address_flags(parser, port=8100)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--upstream-port", type=int, default=8000)
    parser.add_argument("--meter", action="store_true", help="parse and meter every read")
    args = parser.parse_args()
    upstream = (args.upstream_host, args.upstream_port)
    uvloop.run(serve(lambda: ClientSide(upstream, args.meter), args.host, args.port))


if __name__ == "__main__":
    main()
