"""The load client of bench/proxy_overhead.py: one cell's closed-loop streams, in its own process.

It times every stream with latency_proxy's SSEParser and StreamMeter (the one definition of
TTFT and inter-event gaps, shared with the proxy and loadgen) and samples the CPU time of the
processes it is told to watch over the measured window, through psutil (user + system of all
their threads, the same figure /proc/<pid>/stat holds).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
import psutil
import uvloop

from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants (nginx's worker, any child of the proxy)."""
    root = psutil.Process(pid)
    return [pid, *(child.pid for child in root.children(recursive=True))]


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of the processes so far (every thread)."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def rss_bytes(pids: Iterable[int]) -> int:
    return sum(psutil.Process(pid).memory_info().rss for pid in pids)


@dataclass(frozen=True)
class Cell:
    """One measurement: `streams` closed-loop requests of `tokens` tokens against one target."""

    target: str
    url: str
    streams: int
    tokens: int
    stream: bool  # an SSE stream, or one JSON answer (the classifier/embedding shape)
    warmup: float
    duration: float
    watch: dict[str, list[int]]  # role ("upstream", "intermediary") -> pids to sample
    cpus: tuple[int, ...] | None = None  # the client's CPU affinity, when pinned


@dataclass
class CellResult:
    """What the client saw of one cell, plus the CPU it sampled."""

    target: str
    streams: int
    tokens: int
    stream: bool
    window_s: float
    requests: int  # started inside the window and finished: the latency samples
    completed: int  # finished inside the window: what the window's CPU is divided by
    errors: dict[str, int]  # kind (HTTP status or exception type) -> count, whole cell
    events: int  # SSE events delivered inside the window
    ttft_s: list[float]
    itl_s: list[float]
    e2e_s: list[float]
    cpu_s: dict[str, float]  # role -> CPU seconds over the window
    rss_bytes: int  # the intermediary's, at the end of the window


def run_cell(cell: Cell) -> CellResult:
    """Entry point in the client process."""
    if cell.cpus is not None:
        os.sched_setaffinity(0, cell.cpus)
    return uvloop.run(_run_cell(cell))


def request_body(tokens: int, stream: bool) -> bytes:
    return json.dumps(
        {
            "model": "bench",
            "stream": stream,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "benchmark"}],
        }
    ).encode()


async def _run_cell(cell: Cell) -> CellResult:
    watch = {**cell.watch, "client": [os.getpid()]}
    body = request_body(cell.tokens, cell.stream)
    start = time.monotonic()
    window_start = start + cell.warmup
    window_end = window_start + cell.duration
    ttfts: list[float] = []
    itls: list[float] = []
    e2es: list[float] = []
    counts = {"events": 0, "requests": 0, "completed": 0}
    errors: Counter[str] = Counter()

    async def one_request(session: aiohttp.ClientSession) -> None:
        t0 = time.monotonic()
        measured = t0 >= window_start
        meter, parser = StreamMeter(t0), SSEParser()
        try:
            async with session.post(
                cell.url, data=body, headers={"content-type": "application/json"}
            ) as r:
                if r.status != 200:
                    errors[f"HTTP {r.status}"] += 1
                    await r.read()
                    return
                if not cell.stream:
                    meter.on_body(await r.read())
                async for chunk in r.content.iter_any():
                    t = time.monotonic()
                    events = parser.feed(chunk)
                    if window_start <= t < window_end:
                        counts["events"] += len(events)
                    for event in events:
                        meter.on_event(t, event)
        except (aiohttp.ClientError, TimeoutError) as exc:
            errors[type(exc).__name__] += 1
            return
        t_end = time.monotonic()
        timing = meter.finish(t_end)
        if window_start <= t_end < window_end:
            counts["completed"] += 1
        if measured and (timing.ttft_s is not None or not cell.stream):
            counts["requests"] += 1
            e2es.append(timing.e2e_s)
            if timing.ttft_s is not None:
                ttfts.append(timing.ttft_s)
                itls.extend(timing.itl_s)

    async def stream(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < window_end:
            await one_request(session)

    async def sample_window() -> tuple[dict[str, float], int]:
        await asyncio.sleep(window_start - time.monotonic())
        before = {role: cpu_seconds(pids) for role, pids in watch.items()}
        await asyncio.sleep(window_end - time.monotonic())
        after = {role: cpu_seconds(pids) for role, pids in watch.items()}
        rss = rss_bytes(watch["intermediary"]) if watch.get("intermediary") else 0
        return {role: after[role] - before[role] for role in watch}, rss

    connector = aiohttp.TCPConnector(limit=cell.streams)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sampler = asyncio.create_task(sample_window())
        await asyncio.gather(*(stream(session) for _ in range(cell.streams)))
        cpu, rss = await sampler
    return CellResult(
        target=cell.target,
        streams=cell.streams,
        tokens=cell.tokens,
        stream=cell.stream,
        window_s=cell.duration,
        requests=counts["requests"],
        completed=counts["completed"],
        errors=dict(errors),
        events=counts["events"],
        ttft_s=ttfts,
        itl_s=itls,
        e2e_s=e2es,
        cpu_s=cpu,
        rss_bytes=rss,
    )
