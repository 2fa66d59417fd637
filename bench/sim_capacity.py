"""How many streams can loadgen.sim carry before its own timing slips? Prints figures.

The simulator is the load target of this project's benchmarks, so its emitted inter-token
gaps must follow the model's schedule. This starts `python -m loadgen.sim --ttft T --itl I`
pinned to one core, drives N concurrent streams from a client pinned to the other core
(aiohttp + uvloop, timestamps taken as bytes arrive, latency_proxy's SSE parser), and reports
the deviation of every inter-token gap from the schedule, TTFT's deviation, the simulator's
own account of its lateness (loadgen_sim_schedule_lag_seconds), its CPU per event and per
stream, and how busy other processes kept the two cores.

    .venv/bin/python bench/sim_capacity.py                   # 64, 256, 512 streams at 50 ms
    .venv/bin/python bench/sim_capacity.py --streams 256 --duration 20 --realtime
    .venv/bin/python bench/sim_capacity.py --preset llama-70b-awq-tp4-a100 --streams 256

Arrivals are spread over one ITL (like independent clients); --burst starts them all at once.
Connections are opened before the run, and "steady" leaves out the first second after the
last stream started. On a box shared with other jobs, --realtime (SCHED_FIFO) stands in for
dedicated cores. In --preset mode there is no fixed schedule: it reports the engine's CPU
cost, the gap spread and its lateness instead.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from latency_proxy.base.units import parse_duration
from latency_proxy.measure.sse import SSEParser
from loadgen.stack.processes import NotReady, free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def busy_per_cpu() -> list[float]:
    """Seconds each CPU has spent busy (all processes), from /proc/stat."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            ticks = [int(x) for x in line.split()[1:]]
            out.append((sum(ticks) - ticks[3] - ticks[4]) / TICKS)  # minus idle and iowait
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: dict,
    start: float,
) -> tuple[float, list[float]]:
    """Returns (t0, arrival time of every content event)."""
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    t0 = time.monotonic()
    parser, times = SSEParser(), []
    async with session.post(url, json=body) as response:
        async for chunk in response.content.iter_any():
            now = time.monotonic()
            for event in parser.feed(chunk):
                if event.data and event.data != b"[DONE]":
                    times.append(now)
    return t0, times


async def drive(
    url: str, streams: int, tokens: int, itl: float, burst: bool, model: str
) -> list[tuple[float, list[float]]]:
    connector = aiohttp.TCPConnector(limit=streams + 8)
    timeout = aiohttp.ClientTimeout(total=None)
    body = {
        "model": model,
        "prompt": "hello " * 64,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # warm up: open every connection first, so TCP set-up is not in the figures
        async def warm() -> None:
            async with session.post(url, json={**body, "stream": False, "max_tokens": 1}) as r:
                await r.read()

        await asyncio.gather(*[warm() for _ in range(streams)])
        begin = time.monotonic() + 0.5
        spread = 0.0 if burst else itl
        return await asyncio.gather(
            *[one_stream(session, url, body, begin + spread * i / streams) for i in range(streams)]
        )


def start_sim(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    mode = ["--preset", args.preset] if args.preset else ["--ttft", args.ttft, "--itl", args.itl]
    process = subprocess.Popen(
        [sys.executable, "-m", "loadgen.sim", "--port", str(port), *mode],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    os.sched_setaffinity(process.pid, {0})
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, process.pid, args.nice)
    if args.realtime:
        os.sched_setscheduler(process.pid, os.SCHED_FIFO, os.sched_param(1))
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", process)
    except NotReady as exc:
        stop(process)
        raise SystemExit(f"simulator did not start: {exc}") from None
    return process


def sim_view(port: int) -> str:
    """The simulator's own account, from its /metrics: TTFT and ITL means, and how late it
    released tokens against its schedule (loadgen_sim_schedule_lag_seconds)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    lag: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "loadgen_sim_schedule_lag_seconds_bucket":
                lag.append((float(sample.labels["le"]), sample.value))
            else:
                values[sample.name] = sample.value
    ttft = (
        values["vllm:time_to_first_token_seconds_sum"]
        / values["vllm:time_to_first_token_seconds_count"]
    )
    itl = (
        values["vllm:inter_token_latency_seconds_sum"]
        / values["vllm:inter_token_latency_seconds_count"]
    )
    total = lag[-1][1]
    p99 = next(le for le, count in lag if count >= 0.99 * total)
    on_time = dict(lag)[0.002] / total
    return (
        f"  simulator's own view: TTFT mean {ttft * 1e3:.2f} ms, ITL mean {itl * 1e3:.3f} ms; "
        f"released ≤ 2 ms late: {on_time * 100:.2f}%, lag p99 ≤ {p99 * 1e3:g} ms"
    )


def report(
    streams: int,
    args: argparse.Namespace,
    results: list[tuple[float, list[float]]],
    cpu: float,
    wall: float,
    rss: float,
) -> None:
    itl, ttft = parse_duration(args.itl), parse_duration(args.ttft)
    gaps = np.concatenate([np.diff(times) for _, times in results if len(times) > 1])
    # steady state: once every stream has started and had a second to settle
    settled = max(t0 for t0, _ in results) + ttft + 1.0
    steady = np.concatenate([np.diff([t for t in times if t >= settled]) for _, times in results])
    ttfts = np.array([times[0] - t0 for t0, times in results if times])
    events = sum(len(times) for _, times in results)
    rate = events / wall
    print(
        f"\n{streams} streams{' (burst)' if args.burst else ''}: {events} events in "
        f"{wall:.1f} s = {rate:,.0f} events/s"
    )
    if args.preset:
        print(
            f"  gap p50 {np.percentile(gaps, 50) * 1e3:.2f} ms, "
            f"p99 {np.percentile(gaps, 99) * 1e3:.2f} ms (engine schedule, not fixed)"
        )
    else:
        for label, sample in (("all", gaps), ("steady", steady)):
            dev = np.abs(sample - itl) * 1e3
            print(
                f"  {label:6s} |gap - {itl * 1e3:.0f} ms|  p50 {np.percentile(dev, 50):.2f}  "
                f"p99 {np.percentile(dev, 99):.2f}  p99.9 {np.percentile(dev, 99.9):.2f}  "
                f"max {dev.max():.2f} ms  (within 2 ms: {np.mean(dev <= 2) * 100:.2f}%)"
            )
        late = (ttfts - ttft) * 1e3
        print(
            f"  TTFT - {ttft * 1e3:.0f} ms      p50 {np.percentile(late, 50):.2f}  "
            f"p99 {np.percentile(late, 99):.2f} ms"
        )
    print(
        f"  simulator CPU {cpu / wall * 100:.1f}% of one core = {cpu / events * 1e6:.0f} µs "
        f"per event = {cpu / wall / streams * 100:.3f}% of a core per stream; "
        f"RSS {rss:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--ttft", default="50ms")
    parser.add_argument("--itl", default="50ms")
    parser.add_argument("--preset", help="drive the engine with a preset instead")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per stream")
    parser.add_argument("--burst", action="store_true", help="start all streams at once")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run simulator and client at this nice value (e.g. -10 on a shared box)",
    )
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="run simulator and client SCHED_FIFO (a shared box's stand-in for dedicated cores)",
    )
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    gc.freeze()  # no full collections of the start-up objects in the middle of a run
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    if args.realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    tokens = max(2, int(args.duration / parse_duration(args.itl)))
    print(
        f"loadgen.sim capacity: {'preset ' + args.preset if args.preset else 'fixed'} "
        f"ttft={args.ttft} itl={args.itl}, {tokens} tokens per stream; sim on CPU 0, "
        f"client on CPU 1 ({os.cpu_count()} CPUs)"
    )
    for streams in args.streams:
        port = free_port()
        process = start_sim(args, port)
        try:
            url = f"http://127.0.0.1:{port}/v1/completions"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as response:
                model = json.load(response)["data"][0]["id"]
            cpu0, client0, wall0 = cpu_seconds(process.pid), time.process_time(), time.monotonic()
            busy0 = busy_per_cpu()
            results = uvloop.run(
                drive(url, streams, tokens, parse_duration(args.itl), args.burst, model)
            )
            wall, cpu = time.monotonic() - wall0, cpu_seconds(process.pid) - cpu0
            client = time.process_time() - client0
            busy = [b - a for a, b in zip(busy0, busy_per_cpu(), strict=True)]
            report(streams, args, results, cpu, wall, rss_mib(process.pid))
            print(sim_view(port))
            print(
                f"  client CPU {client / wall * 100:.1f}% of one core; other processes: "
                f"{max(0.0, busy[0] - cpu) / wall * 100:.0f}% of CPU 0, "
                f"{max(0.0, busy[1] - client) / wall * 100:.0f}% of CPU 1"
            )
        finally:
            stop(process)


if __name__ == "__main__":
    main()
