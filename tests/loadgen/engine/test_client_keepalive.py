"""loadgen drops an idle connection before the server would (vLLM's uvicorn closes at 5 s),
so no request is sent into a server's close of it."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.engine import client

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"


async def connections_after(gap_s: float) -> int:
    """Two GETs `gap_s` apart to a server that keeps every connection open: how many
    connections the client opened."""
    accepted = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # the client let it go

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with client.session() as http:
        for i in range(2):
            if i:
                await asyncio.sleep(gap_s)
            async with http.get(f"http://127.0.0.1:{port}/v1/models") as response:
                assert await response.json() == {}
    server.close()
    return accepted


def test_an_idle_connection_is_dropped_before_the_servers_keep_alive_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert client.KEEPALIVE_S < 5  # uvicorn's default, and vLLM's
    monkeypatch.setattr(client, "KEEPALIVE_S", 0.2)
    assert asyncio.run(connections_after(0.02)) == 1  # reused while fresh
    assert asyncio.run(connections_after(0.6)) == 2  # dropped once idle past KEEPALIVE_S
