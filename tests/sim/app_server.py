"""The simulator's app under uvicorn on loopback, and a client that measures its streams
with the project's own meter: what the simulator's HTTP tests share."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

import httpx
import orjson
import uvicorn

from latency_proxy.measure.meter import RequestTiming, StreamMeter
from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app

MESSAGES = [{"role": "user", "content": "say something nice"}]


def _serve(app_args: dict[str, object], environ: dict[str, str], port: Connection) -> None:
    """The child: serves the app on a free loopback port and sends which, until terminated."""
    os.environ.clear()  # the test's, as a subprocess started now would see it
    os.environ.update(environ)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        create_app(**app_args), log_level="warning", http="httptools", loop="asyncio"
    )
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        port.send(sock.getsockname()[1])
        await serving

    asyncio.run(main())


# A fresh process forked from one that has imported the app: it shares no interpreter lock
# with the client that times it, nor with the threads earlier tests' fixtures keep running.
_PROCESSES = multiprocessing.get_context("forkserver")
_PROCESSES.set_forkserver_preload(["loadgen.sim.wire.app", "uvicorn"])


class Server:
    """A simulator app under uvicorn in its own process, on a free loopback port."""

    def __init__(self, **app_args: object) -> None:
        self._port, self._childs_end = _PROCESSES.Pipe(duplex=False)
        self._process = _PROCESSES.Process(
            target=_serve, args=(app_args, dict(os.environ), self._childs_end), daemon=True
        )

    def __enter__(self) -> Server:
        self._process.start()
        self._childs_end.close()  # so that a child that dies is seen as the pipe's end
        assert self._port.poll(30), "server did not start"
        try:
            self.url = f"http://127.0.0.1:{self._port.recv()}"
        except EOFError:
            raise AssertionError("server did not start: its process ended") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()  # uvicorn shuts down gracefully on SIGTERM
        self._process.join(10)

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
