"""The simulator's app under uvicorn on loopback, and a client that measures its streams
with the project's own meter: what the simulator's HTTP tests share."""


from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import orjson
import uvicorn

from latency_proxy.measure.meter import RequestTiming, StreamMeter
from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app

MESSAGES = [{"role": "user", "content": "say something nice"}]


class Server:
    """A simulator app under uvicorn in a thread, on a free loopback port."""

    def __init__(self, **app_args: object) -> None:
        self.app = create_app(**app_args)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(self.app, log_level="warning", http="httptools", loop="asyncio")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]})

    def __enter__(self) -> Server:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    def scrape(self) -> str:
        return httpx.get(self.url + "/metrics").text

    def metric(self, name: str, scrape: str | None = None, **labels: str) -> float:
        """One series' value, from `scrape` when given so that several read one instant."""
        text = self.scrape() if scrape is None else scrape
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            if series.split("{")[0] == name and all(
                f'{k}="{v}"' in series for k, v in labels.items()
            ):
                return float(value)
        raise AssertionError(f"{name} {labels} not in /metrics")


@contextmanager
def serve(**app_args: object) -> Iterator[Server]:
    with Server(**app_args) as server:
        yield server


async def stream(
    client: httpx.AsyncClient, url: str, body: dict, headers: dict | None = None
) -> tuple[RequestTiming, list[dict]]:
    """One streamed request measured with the project's StreamMeter; returns the payloads."""
    parser, payloads = SSEParser(), []
    t0 = time.monotonic()
    meter = StreamMeter(t0)
    async with client.stream(
        "POST", url, json={**body, "stream": True}, headers=headers
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for chunk in response.aiter_raw():
            now = time.monotonic()
            for event in parser.feed(chunk):
                meter.on_event(now, event)
                if event.data and event.data != b"[DONE]":
                    payloads.append(orjson.loads(event.data))
    return meter.finish(time.monotonic()), payloads


USAGE = {"include_usage": True, "continuous_usage_stats": True}


def completion_timing(server: Server, body: dict) -> RequestTiming:
    """One streamed /v1/completions request (usage asked for), measured from the client."""

    async def go() -> RequestTiming:
        async with httpx.AsyncClient(timeout=10) as client:
            url = server.url + "/v1/completions"
            timing, _ = await stream(client, url, {**body, "stream_options": USAGE})
            return timing

    return asyncio.run(go())


def arrivals(timing: RequestTiming) -> list[float]:
    """When each content event reached the client, counted from the request's start."""
    return list(itertools.accumulate(timing.itl_s, initial=timing.ttft_s))
