"""Soak: the proxy under steady load from a faulty simulated vLLM, watched for anything that grows.

A leak in a long-running sidecar shows up as a slope, not a spike: memory, file descriptors,
threads or the in-flight gauge creeping up, or the latency it adds drifting. This runs
`python -m loadgen.sim --preset … --fault …` (errors, cut, reset and stalled streams,
malformed events, engine restarts) behind `python -m latency_proxy` and holds N closed-loop
streams through the proxy (loadgen's client, the one definition of TTFT) for the duration.
Every interval it samples the proxy process and both servers' /metrics:

    rss_mib, fds, threads      /proc/<proxy pid>: resident memory, open fds, OS threads (the
                               proxy exports no asyncio task count, so tasks are not observable)
    requests_active            latency_proxy_requests_active (should sit at the load, N)
    ttft_overhead_ms           the proxy's mean TTFT (gen_ai_server_time_to_first_token_seconds)
                               minus the simulator's own (vllm:time_to_first_token_seconds)
                               over the interval: what the proxy and the loopback hop add,
                               the load client's own lag left out
    proxy_overhead_ms          latency_proxy_overhead_seconds{phase="request"}: the proxy's
                               own account of request in → handed upstream

After a warm-up (pools, caches and the allocator fill; left out of the fit) each series gets
a least-squares line against time. A series *trends upward* when both hold:

- the slope is significant: more than 3 standard errors above 0 (noise alone does that
  about once in 700 fits), so a flat but noisy series passes;
- and it matters: the rise the line predicts over the fitted span exceeds the series'
  tolerance — RSS 5% of its median (an allocator breathes by a few percent; a leak of 1 KiB
  per request at ~30 requests/s adds ~100 MiB an hour), fds 8 and threads 2 (they are counts
  that churn by a few connections or an executor thread; a leak adds one per request or
  per fault), requests_active 2 (bookkeeping that loses one request in a thousand drifts by
  far more), TTFT overhead and the proxy's overhead 1 ms (a quarter of what the proxy adds
  at 64 streams, README "Performance").

A longer run is more sensitive, as it should be: a true leak's rise grows with the span while
the noise does not. After the load stops, requests_active must return to 0 within 10 s (a
stuck request would otherwise pass as a flat line). Exit 1 when anything trends upward or
sticks, 0 otherwise.

    python bench/soak.py [--duration 10m] [--interval 10s] [--warmup 1m] [--streams 64]
                         [--preset llama-70b-awq-tp4-a100] [--fault SPEC …] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from latency_proxy.base.units import parse_duration
from loadgen.analysis.server_metrics import FIGURES, Histogram, parse
from loadgen.engine import client
from loadgen.engine.targets import Target
from loadgen.stack.processes import free_port, running, simulator

REPO = Path(__file__).resolve().parent.parent
FAULTS = [
    "error=0.02:503",
    "error=0.01:429",
    "error=0.01:500",
    "cut=0.01@20",
    "reset=0.01@10",
    "stall=0.01@10:1s",
    "malformed=0.01@5:text",
    "malformed=0.01@5:shape",
    "restart=0.0005:2s",
]
SERIES = ("rss_mib", "fds", "threads", "requests_active", "ttft_overhead_ms", "proxy_overhead_ms")
SIGNIFICANT = 3.0  # standard errors


@dataclass(frozen=True, slots=True)
class Tolerance:
    absolute: float = 0.0
    relative: float = 0.0  # of the series' median

    def of(self, values: Sequence[float]) -> float:
        return max(self.absolute, self.relative * abs(float(np.median(values))))


TOLERANCES = {
    "rss_mib": Tolerance(relative=0.05),
    "fds": Tolerance(8),
    "threads": Tolerance(2),
    "requests_active": Tolerance(2),
    "ttft_overhead_ms": Tolerance(1.0),
    "proxy_overhead_ms": Tolerance(1.0),
}


def trend(t: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of y against t (per second) and its standard error."""
    x, v = np.asarray(t, float), np.asarray(y, float)
    if len(x) < 3:
        return 0.0, math.inf
    x = x - x.mean()
    slope = float((x * (v - v.mean())).sum() / (x * x).sum())
    residuals = v - v.mean() - slope * x
    stderr = math.sqrt(float((residuals**2).sum()) / (len(x) - 2) / float((x * x).sum()))
    return slope, stderr


def verdict(name: str, t: Sequence[float], y: Sequence[float]) -> dict:
    """The fitted line of one series and whether it trends upward (module docstring)."""
    slope, stderr = trend(t, y)
    rise = slope * (t[-1] - t[0]) if len(t) > 1 else 0.0
    tolerance = TOLERANCES[name].of(y)
    upward = slope > SIGNIFICANT * stderr and rise > tolerance
    return {
        "first": y[0],
        "last": y[-1],
        "median": float(np.median(y)),
        "slope_per_hour": slope * 3600,
        "rise": rise,
        "tolerance": tolerance,
        "t": slope / stderr if stderr > 0 else math.inf,
        "upward": bool(upward),
    }


# --- readings ---------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, float]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "threads": int(status["Threads"]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        return resp.read().decode()


def gauge(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def histogram(text: str, figure: str) -> Histogram:
    name = FIGURES[figure][0]
    return parse(text, figure, time.time()).histograms.get(name, Histogram((), 0.0, 0.0))


def mean_ms(now: Histogram, before: Histogram) -> float | None:
    window = now - before
    return 1e3 * window.sum / window.count if window.count > 0 else None


# --- the load ---------------------------------------------------------------------------------


class Load:
    """N closed-loop streams through the proxy, counting requests and errors."""

    def __init__(self, target: Target, streams: int, input_tokens: int, output_tokens: int):
        self.target = target
        self.streams = streams
        prompt = " ".join(f"w{i % 97}" for i in range(input_tokens))
        self.body = {
            "model": target.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self.requests = 0
        self.errors: dict[str, int] = {}
        self.stop = asyncio.Event()

    async def run(self) -> None:
        clock = client.Clock()
        async with client.session(self.streams) as http:

            async def stream() -> None:
                while not self.stop.is_set():
                    intended = time.perf_counter()
                    record = await client.send(
                        http, self.target, "/v1/chat/completions", self.body, intended, clock, 30
                    )
                    self.requests += 1
                    if record.error:
                        self.errors[record.error] = self.errors.get(record.error, 0) + 1

            await asyncio.gather(*(stream() for _ in range(self.streams)))


async def soak(args: argparse.Namespace, sim_url: str, proxy_pid: int, admin: str, url: str):
    target = Target("proxy", url, args.model)
    load = Load(target, args.streams, args.input_tokens, args.output_tokens)
    runner = asyncio.create_task(load.run())
    start = time.monotonic()
    before = {"sim": scrape(sim_url), "proxy": scrape(admin)}
    samples = []
    while (elapsed := time.monotonic() - start) < args.duration:
        await asyncio.sleep(args.interval)
        now = {"sim": scrape(sim_url), "proxy": scrape(admin)}
        sim_ttft = mean_ms(histogram(now["sim"], "ttft_s"), histogram(before["sim"], "ttft_s"))
        proxy_ttft, proxy_overhead = (
            mean_ms(histogram(now["proxy"], figure), histogram(before["proxy"], figure))
            for figure in ("proxy_ttft_s", "proxy_overhead_s")
        )
        sample = {
            "t": round(time.monotonic() - start, 1),
            **proc_status(proxy_pid),
            "requests_active": gauge(now["proxy"], "latency_proxy_requests_active"),
            "ttft_overhead_ms": None if None in (proxy_ttft, sim_ttft) else proxy_ttft - sim_ttft,
            "proxy_overhead_ms": proxy_overhead,
            "requests": load.requests,
        }
        samples.append(sample)
        before = now
        print(json.dumps(sample), file=sys.stderr, flush=True)
    load.stop.set()
    await runner
    deadline = time.monotonic() + 10
    while (active := gauge(scrape(admin), "latency_proxy_requests_active")) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.2)
    return samples, load, active, elapsed


def report(samples: list[dict], warmup: float) -> dict[str, dict]:
    fitted = [s for s in samples if s["t"] > warmup]
    verdicts = {}
    for name in SERIES:
        points = [(s["t"], s[name]) for s in fitted if s[name] is not None]
        if len(points) >= 3:
            verdicts[name] = verdict(name, *zip(*points, strict=True))
    return verdicts


def markdown(verdicts: dict[str, dict]) -> str:
    lines = [
        "| series | first | last | median | slope / hour | fitted rise | tolerance | t | trend |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in verdicts.items():
        keys = ("first", "last", "median", "slope_per_hour", "rise", "tolerance", "t")
        cells = [v[k] for k in keys]
        figures = " | ".join(f"{c:.2f}" for c in cells)
        lines.append(f"| {name} | {figures} | {'UP' if v['upward'] else 'flat'} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=parse_duration, default=600.0)
    p.add_argument("--interval", type=parse_duration, default=10.0)
    p.add_argument("--warmup", type=parse_duration, default=60.0, help="left out of the fit")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--preset", default="llama-70b-awq-tp4-a100")
    p.add_argument("--model", default="llama-70b", help="the preset's served name")
    p.add_argument("--fault", action="append", help=f"the simulator's (default: {FAULTS})")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--json", type=Path, help="write samples and verdicts here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    faults = [a for fault in args.fault or FAULTS for a in ("--fault", fault)]
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        sim_args = ["--preset", args.preset, "--seed", str(args.seed), *faults]
        with simulator(*sim_args, log=Path(tmp) / "sim.log") as sim_url:
            port, admin_port = free_port(), free_port()
            command = [sys.executable, "-m", "latency_proxy", "--upstream", sim_url]
            command += ["--port", str(port), "--admin-port", str(admin_port)]
            admin = f"http://127.0.0.1:{admin_port}"
            log = Path(tmp) / "proxy.log"
            with running(command, admin + "/healthz", log, cwd=REPO) as proxy:
                url = f"http://127.0.0.1:{port}"
                samples, load, active, elapsed = asyncio.run(
                    soak(args, sim_url, proxy.pid, admin, url)
                )
    verdicts = report(samples, args.warmup)
    stuck = active != 0
    print(f"{load.requests} requests in {elapsed:.0f} s through the proxy, {args.streams} streams")
    print(f"errors: {json.dumps(dict(sorted(load.errors.items())))}")
    print(markdown(verdicts))
    print(f"requests_active after the load stopped: {active:g}")
    if args.json:
        result = {"samples": samples, "verdicts": verdicts, "errors": load.errors, "stuck": stuck}
        args.json.write_text(json.dumps(result, indent=1))
    failed = [name for name, v in verdicts.items() if v["upward"]] + (["stuck"] if stuck else [])
    if failed:
        print(f"FAIL: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
