"""The proxy's ceiling and its knee, with one worker and with two (--workers).

**Ceiling.** An upstream that streams as fast as it can (bench/sse_upstream.py with no
TTFT and no gap between tokens) reached through the Python relay floor, nginx with 1 and 2
worker processes and the proxy with 1 and 2 workers, at 64 and 256 concurrent streams of
64 and 256 tokens. Per cell: content events delivered per second, and events per CPU-second
of the intermediary (its ceiling per core, whatever the load side could offer); for two
workers, how the CPU split between them (connections spread by the kernel). The
intermediary is pinned to its own CPUs, the load side (client, upstream) to the others.

**Knee.** The paced upstream (first token at 50 ms, then one every 10 ms, 64 tokens) reached
directly and through one proxy worker, with ever more streams: the offered event rate goes
from 10% to 100% of one worker's ceiling (its events per CPU-second from the ceiling run, or
--ceiling). Per level: added TTFT P50 / P99 (proxy minus direct, same level) and the
proxy's event-loop lag P50 / P99 over the cell (from its histogram on /metrics).

Interleaved repeats (--repeat): every cell once, then again. Every run writes its JSON to
bench/results/ceiling-<time>.json; bench/performance_tables.py renders it.

    python bench/ceiling.py [--part ceiling,knee] [--repeat 3] [--duration 4s]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson
import psutil
from overhead_client import Cell, CellResult, process_tree, run_cell
from proxy_overhead import HERE, REPO, RESULTS, Pinning, _source, start_nginx, start_relay
from proxy_overhead import start_proxy as start_latency_proxy

from latency_proxy.base.units import parse_duration
from latency_proxy.telemetry.instruments import LOOP_LAG
from loadgen.stack.processes import free_port, running

CEILING_TARGETS = ("relay", "nginx", "nginx×2", "proxy", "proxy×2")
KNEE_LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0)
KNEE_TTFT, KNEE_ITL, KNEE_TOKENS = 0.05, 0.01, 64


def start_upstream(tmp: Path, pin: Pinning, ttft: float, itl: float):
    port = free_port()
    args = pin.load_side([
        sys.executable, str(HERE / "sse_upstream.py"), "--port", str(port),
        "--ttft", str(ttft), "--itl", str(itl),
    ])  # fmt: skip
    log = tmp / f"upstream-{ttft}-{itl}.log"
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", log, cwd=REPO)


def worker_pids(pid: int) -> list[int]:
    """A supervisor's worker processes (its spawned children, not the resource tracker)."""
    children = psutil.Process(pid).children()
    return [c.pid for c in children if "spawn_main" in " ".join(c.cmdline())]


class Stack:
    """The upstream and the intermediaries of one part, started once."""

    def __init__(self, stack: contextlib.ExitStack, pin: Pinning, targets: Sequence[str],
                 ttft: float, itl: float, nginx: str) -> None:  # fmt: skip
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ceiling-")))
        upstream, started = start_upstream(tmp, pin, ttft, itl)
        self.upstream_pid = stack.enter_context(started).pid
        self.ports: dict[str, int] = {"direct": upstream}
        self.pids: dict[str, list[int]] = {"direct": []}
        self.workers: dict[str, list[int]] = {}
        self.admin: dict[str, int] = {}
        for target in targets:
            name, _, count = target.partition("×")
            workers = int(count or 1)
            if name == "relay":
                port, proc = start_relay(upstream, tmp, False, pin)
            elif name == "nginx":
                port, proc = start_nginx(nginx, upstream, tmp, pin, workers)
            elif name == "proxy":
                self.admin[target] = free_port()
                port, proc = start_latency_proxy(
                    upstream, tmp, pin, workers=workers, admin=self.admin[target]
                )
            else:
                continue
            pid = stack.enter_context(proc).pid
            if name == "proxy" and workers > 1:
                _wait_ready(self.admin[target])
                self.workers[target] = worker_pids(pid)
            self.ports[target] = port
            self.pids[target] = process_tree(pid)

    def cell(self, target: str, streams: int, tokens: int, warmup: float, duration: float,
             pin: Pinning) -> Cell:  # fmt: skip
        watch = {"upstream": [self.upstream_pid]}
        if self.pids[target]:
            watch["intermediary"] = self.pids[target]
        for n, pid in enumerate(self.workers.get(target, [])):
            watch[f"worker{n}"] = [pid]
        url = f"http://127.0.0.1:{self.ports[target]}/v1/chat/completions"
        return Cell(target, url, streams, tokens, True, warmup, duration, watch, pin.load)


def _wait_ready(admin: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2),
        ):
            return
        time.sleep(0.1)
    raise RuntimeError("proxy workers not ready")


def lag_buckets(admin: int) -> dict[float, float]:
    """The lag histogram's cumulative buckets on the proxy's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as page:
        text = page.read().decode()
    prefix = LOOP_LAG.prometheus_name + '_bucket{le="'
    return {
        float(line[len(prefix) :].split('"')[0]): float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """histogram_quantile over the buckets' increase (linear inside a bucket, as Prometheus)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None
    rank, low, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return low
            return low + (bound - low) * (rank - below) / max(count - below, 1e-12)
        low, below = bound, count
    return low


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ceiling_row(result: CellResult, repeat: int) -> dict:
    cpu = result.cpu_s.get("intermediary", 0.0)
    row = {
        "part": "ceiling", "repeat": repeat, "target": result.target,
        "streams": result.streams, "tokens": result.tokens,
        "events_per_s": result.events / result.window_s,
        "events_per_cpu_s": result.events / cpu if cpu else None,
        "intermediary_cores": cpu / result.window_s,
        "load_cores": (result.cpu_s["client"] + result.cpu_s["upstream"]) / result.window_s,
        "errors": result.errors,
    }  # fmt: skip
    shares = [v for k, v in sorted(result.cpu_s.items()) if k.startswith("worker")]
    if shares and sum(shares):
        row["worker_cpu_shares"] = [s / sum(shares) for s in shares]
    return row


def run_ceiling(args, pin: Pinning, client: ProcessPoolExecutor) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    with contextlib.ExitStack() as stack:
        s = Stack(stack, pin, args.targets, 0.0, 0.0, args.nginx)
        for repeat in range(args.repeat):
            for streams in args.streams:
                for tokens in args.tokens:
                    for target in args.targets:
                        print(f"… ceiling {repeat + 1}/{args.repeat}: {target} × {streams} × "
                              f"{tokens}", file=sys.stderr, flush=True)  # fmt: skip
                        cell = s.cell(target, streams, tokens, args.warmup, args.duration, pin)
                        rows.append(ceiling_row(client.submit(run_cell, cell).result(), repeat))
    return rows


def run_knee(args, pin: Pinning, client: ProcessPoolExecutor, ceiling: float) -> list[dict]:  # type: ignore[no-untyped-def]
    per_stream = KNEE_TOKENS / (KNEE_TTFT + KNEE_TOKENS * KNEE_ITL)  # events/s of one stream
    rows = []
    with contextlib.ExitStack() as stack:
        s = Stack(stack, pin, ["proxy"], KNEE_TTFT, KNEE_ITL, args.nginx)
        for repeat in range(args.repeat):
            for level in KNEE_LEVELS:
                streams = max(1, round(level * ceiling / per_stream))
                found = {}
                for target in ("direct", "proxy"):
                    print(f"… knee {repeat + 1}/{args.repeat}: {target} at {level:.0%} "
                          f"({streams} streams)", file=sys.stderr, flush=True)  # fmt: skip
                    before = lag_buckets(s.admin["proxy"]) if target == "proxy" else {}
                    cell = s.cell(target, streams, KNEE_TOKENS, args.warmup, args.duration, pin)
                    found[target] = client.submit(run_cell, cell).result()
                    if target == "proxy":
                        after = lag_buckets(s.admin["proxy"])
                        lag = {q: quantile(q, before, after) for q in (0.5, 0.99)}
                direct, proxy = found["direct"], found["proxy"]
                rows.append({
                    "part": "knee", "repeat": repeat, "level": level, "streams": streams,
                    "offered_events_per_s": streams * per_stream,
                    "events_per_s": proxy.events / proxy.window_s,
                    "added_ttft_p50_ms": _added(direct.ttft_s, proxy.ttft_s, 0.5),
                    "added_ttft_p99_ms": _added(direct.ttft_s, proxy.ttft_s, 0.99),
                    "lag_p50_ms": None if lag[0.5] is None else lag[0.5] * 1e3,
                    "lag_p99_ms": None if lag[0.99] is None else lag[0.99] * 1e3,
                    "proxy_cores": proxy.cpu_s["intermediary"] / proxy.window_s,
                    "load_cores": (proxy.cpu_s["client"] + proxy.cpu_s["upstream"])
                    / proxy.window_s,
                })  # fmt: skip
    return rows


def _added(direct: list[float], proxy: list[float], q: float) -> float | None:
    d, p = _pct(direct, q), _pct(proxy, q)
    return None if d is None or p is None else (p - d) * 1e3


def one_worker_ceiling(rows: list[dict]) -> float:
    """One worker's events per CPU-second: the median over its ceiling cells."""
    return statistics.median(
        r["events_per_cpu_s"] for r in rows if r["target"] == "proxy" and r["events_per_cpu_s"]
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="ceiling,knee", help="ceiling, knee or both")
    parser.add_argument("--streams", default="64,256", help="ceiling: concurrent streams")
    parser.add_argument("--tokens", default="64,256", help="ceiling: tokens per stream")
    parser.add_argument("--targets", default=",".join(CEILING_TARGETS))
    parser.add_argument("--ceiling", type=float, help="knee: one worker's events per CPU-second")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=parse_duration, default=4.0)
    parser.add_argument("--warmup", type=parse_duration, default=1.0)
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.part = args.part.split(",")
    args.streams = [int(s) for s in args.streams.split(",")]
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.targets = [t for t in CEILING_TARGETS if t in args.targets.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    pin = Pinning(True)
    source = _source()
    rows: list[dict] = []
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as client:
        if "ceiling" in args.part:
            rows += run_ceiling(args, pin, client)
        if "knee" in args.part:
            ceiling = args.ceiling or one_worker_ceiling(rows)
            rows += run_knee(args, pin, client, ceiling)
    result = {
        "command": " ".join(["python", "bench/ceiling.py", *(argv or sys.argv[1:])]),
        **source,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "pinning": pin.describe()},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": rows,
    }
    out = args.out or RESULTS / f"ceiling-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"raw figures: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
