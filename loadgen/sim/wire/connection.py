"""The connection under a request, for the faults that break it: a close mid-stream, a TCP
reset, an engine restart that drops every stream in flight.

ASGI gives an app no socket: uvicorn closes the connection when an app raises mid-response,
and logs it as an error. `HttpProtocol` is uvicorn's httptools protocol that also puts the
request's transport in its scope (`scope["extensions"][TRANSPORT]`), so the simulator can
close it, or reset it, itself and quietly. The simulator's command line serves with it, and so
do the tests' upstreams; under another server a cut falls back to raising.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from starlette.types import Receive, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TRANSPORT = "loadgen.sim.transport"


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, handing each request its transport."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # an ASGI extension of this server's own: the scope's TypedDict holds only dicts there
        extensions: dict[str, Any] = {TRANSPORT: self.transport}
        self.scope["extensions"] = extensions


def transport_of(scope: Scope) -> asyncio.Transport | None:
    return (scope.get("extensions") or {}).get(TRANSPORT)


def cut(transport: asyncio.Transport, *, reset: bool) -> None:
    """Close the connection (what is buffered goes out, then FIN), or reset it (RST now)."""
    if not reset:
        transport.close()
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:  # SO_LINGER 0: close() sends an RST and drops the buffer
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def drop(scope: Scope, receive: Receive, *, reset: bool) -> bool:
    """Cut the request's connection and wait until the server has seen it go, so it neither
    answers nor logs; False when the server gave no transport."""
    transport = transport_of(scope)
    if transport is None:
        return False
    cut(transport, reset=reset)
    while (await receive())["type"] != "http.disconnect":
        pass
    return True
