"""The pool lets an idle upstream connection go before the upstream does (--upstream-keepalive).

vLLM's API server is uvicorn: it closes a connection idle for its keep-alive
(VLLM_HTTP_TIMEOUT_KEEP_ALIVE). A POST the proxy writes on such a connection at that instant
gets no answer and, rightly never sent twice, fails 502. Here the upstream is real uvicorn on
uvloop with a 1 s keep-alive, and its loop is held busy in an I/O callback across each
request's arrival (as a loaded API server's is): on the next turn uvloop runs due timers
before it reads sockets, so a request that arrived just before the deadline is read after
it, and the race that is rare in production is certain here.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadgen.stack.processes import free_port
from tests.support.proxy import proxy_env
from tests.support.scripted_upstream import ServerThread

UPSTREAM_KEEPALIVE = 1.0  # seconds the upstream keeps an idle connection
BUSY = 0.25  # how long the upstream's loop is held, from shortly before a request arrives
AHEAD = 0.09  # how long before the request the hold begins


class Answering:
    """An ASGI app that answers every request with a small JSON body; a byte written to
    `hold_line` holds its loop busy for BUSY seconds inside an I/O callback."""

    def __init__(self) -> None:
        self._wake, self.hold_line = socket.socketpair()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            asyncio.get_running_loop().add_reader(self._wake, self._hold)
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"ok":true}'})

    def _hold(self) -> None:
        self._wake.recv(1)
        time.sleep(BUSY)


@pytest.fixture(scope="module")
def closing_upstream() -> Iterator[tuple[str, Answering]]:
    app = Answering()
    port = free_port()
    options = {"loop": "uvloop", "http": "httptools", "timeout_keep_alive": UPSTREAM_KEEPALIVE}
    with ServerThread(app, port, **options):
        yield f"http://127.0.0.1:{port}", app


def status_after_idling(proxy_url: str, app: Answering, idle: float) -> int:
    """POST once, wait `idle` seconds, then POST again (the upstream busy as it arrives)."""
    with httpx.Client(base_url=proxy_url, timeout=5) as client:
        assert client.post("/v1/completions", content=b"{}").status_code == 200
        done = time.perf_counter()
        time.sleep(idle - AHEAD)
        app.hold_line.send(b"h")
        time.sleep(done + idle - time.perf_counter())
        return client.post("/v1/completions", content=b"{}").status_code


@pytest.fixture(scope="module")
def short_keepalive(start_module_proxy, closing_upstream) -> str:
    url, _ = closing_upstream
    return start_module_proxy(
        "--upstream", url, "--upstream-keepalive", "800ms", env=proxy_env(None)
    ).url


@pytest.mark.parametrize("idle", [0.5, 0.99, 1.5])
def test_no_post_meets_a_connection_the_upstream_is_closing(
    short_keepalive, closing_upstream, idle: float
) -> None:
    assert status_after_idling(short_keepalive, closing_upstream[1], idle) == 200


def test_a_keepalive_longer_than_the_upstreams_loses_the_race(
    start_proxy, closing_upstream
) -> None:
    """The control: with the former 15 s the same POST meets the closing connection."""
    url, app = closing_upstream
    proxy = start_proxy("--upstream", url, "--upstream-keepalive", "15s", env=proxy_env(None))
    assert status_after_idling(proxy.url, app, 0.99) == 502
