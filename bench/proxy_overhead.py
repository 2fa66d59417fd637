"""Proxy overhead: one scripted upstream reached directly, via nginx, a Python relay and the proxy.

One run measures, per concurrency (closed-loop streams), the same fast SSE upstream (first token
at 50 ms, then one every 10 ms; bench/sse_upstream.py, its own process) reached five ways:

- direct: the baseline every "added" figure is taken against;
- nginx: Debian's nginx, one worker, `proxy_buffering off`, HTTP/1.1 keep-alive upstream — the
  reference for what a non-Python pass-through costs;
- relay: bench/relay_floor.py, a raw TCP relay on uvloop — the floor for a Python pass-through;
- relay+meter: the same relay running SSEParser + StreamMeter on every response read — the
  floor plus the proxy's own parsing and metering;
- proxy: `python -m latency_proxy` with its default settings (no OTLP endpoint: spans are
  built, not exported);
- proxy+otlp: the same exporting its spans over OTLP/HTTP as deploy/ configures it (metrics
  scraped, not pushed) to bench/otlp_sink.py, which discards them — what tracing costs.

It prints added TTFT p50/p99 and added inter-event p99 against direct, events per second, the
intermediary's CPU time per 1,000 events delivered (from /proc/<pid>/stat over the measured
window) and its RSS, and the proxy's ratios to nginx. The load client runs in its own process
and times streams with latency_proxy's SSEParser and StreamMeter (the one definition of TTFT).

    python bench/proxy_overhead.py [--streams 1,64] [--duration 12s] [--tokens 64] [--json]
                                   [--profile FILE]

--profile FILE samples the proxy with py-spy over each proxy cell's measured window (the last
cell's samples stay in FILE, py-spy's raw format) and prints where its CPU per event went, by
layer (bench/profile_layers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np
import uvloop
from profile_layers import by_layer, record_later  # bench/, beside this script
from profile_layers import markdown as layers_markdown

from latency_proxy.meter import StreamMeter
from latency_proxy.sse import SSEParser
from latency_proxy.units import parse_duration
from loadgen.processes import free_port, running

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGETS = ("direct", "nginx", "relay", "relay+meter", "proxy", "proxy+otlp")
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream sse {{ server 127.0.0.1:{upstream}; keepalive 1024; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://sse;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


# --- /proc readings ----------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # the command name may hold spaces


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of the processes so far."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICK


def rss_bytes(pids: Sequence[int]) -> int:
    return sum(int(_stat_fields(pid)[21]) * PAGE_SIZE for pid in pids)


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants (uvicorn workers, nginx's worker)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(
                    int(entry.name)
                )
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


# --- the load client (runs in its own process) ------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One measurement: `streams` closed-loop streams against one target."""

    target: str
    url: str
    streams: int
    tokens: int
    warmup: float
    duration: float
    watch: dict[str, list[int]]  # role ("upstream", "intermediary") -> pids to sample


@dataclass
class CellResult:
    """What the client saw of one cell, plus the CPU it sampled."""

    target: str
    streams: int
    window_s: float
    requests: int  # started inside the window, finished
    errors: dict[str, int]  # kind (HTTP status or exception type) -> count, whole cell
    events: int  # SSE events delivered inside the window
    ttft_s: list[float]
    itl_s: list[float]
    cpu_s: dict[str, float]  # role -> CPU seconds over the window
    rss_bytes: int  # the intermediary's, at the end of the window


def run_cell(cell: Cell) -> CellResult:
    """Entry point in the client process."""
    return uvloop.run(_run_cell(cell))


async def _run_cell(cell: Cell) -> CellResult:
    watch = {**cell.watch, "client": [os.getpid()]}
    body = json.dumps(
        {
            "model": "bench",
            "stream": True,
            "max_tokens": cell.tokens,
            "messages": [{"role": "user", "content": "benchmark"}],
        }
    ).encode()
    start = time.monotonic()
    window_start = start + cell.warmup
    window_end = window_start + cell.duration
    ttfts: list[float] = []
    itls: list[float] = []
    counts = {"events": 0, "requests": 0}
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
        timing = meter.finish(time.monotonic())
        if measured and timing.ttft_s is not None:
            counts["requests"] += 1
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
        window_s=cell.duration,
        requests=counts["requests"],
        errors=dict(errors),
        events=counts["events"],
        ttft_s=ttfts,
        itl_s=itls,
        cpu_s=cpu,
        rss_bytes=rss,
    )


# --- the processes under test -----------------------------------------------------------------


def start_upstream(tmp: Path):
    port = free_port()
    args = [sys.executable, str(HERE / "sse_upstream.py"), "--port", str(port)]
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", tmp / "upstream.log", cwd=REPO)


def start_nginx(nginx: str, upstream: int, tmp: Path):
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream, port=port))
    args = [nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)]
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", tmp / "nginx.log", cwd=REPO)


def start_relay(upstream: int, tmp: Path, meter: bool):
    port = free_port()
    args = [
        sys.executable,
        str(HERE / "relay_floor.py"),
        "--upstream-port",
        str(upstream),
        "--port",
        str(port),
        *(["--meter"] if meter else []),
    ]
    log = tmp / ("relay-meter.log" if meter else "relay.log")
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", log, cwd=REPO)


def start_otlp_sink(tmp: Path):
    port = free_port()
    args = [sys.executable, str(HERE / "otlp_sink.py"), "--port", str(port)]
    return port, running(args, f"http://127.0.0.1:{port}/", tmp / "otlp-sink.log", cwd=REPO)


def start_proxy(upstream: int, tmp: Path, otlp: int | None = None):
    """The proxy; with `otlp` (a sink's port) exporting spans as deploy/ has it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if otlp is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
        }
    port, admin = free_port(), free_port()
    args = [
        sys.executable,
        "-m",
        "latency_proxy",
        "--upstream",
        f"http://127.0.0.1:{upstream}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--admin-port",
        str(admin),
    ]
    log = tmp / ("proxy-otlp.log" if otlp is not None else "proxy.log")
    return port, running(args, f"http://127.0.0.1:{admin}/healthz", log, cwd=REPO, env=env)


# --- figures and the report -------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def figures(cell: CellResult) -> dict:
    """The figures of one cell on its own."""
    ms = 1000.0
    ttft50, ttft99 = _percentile(cell.ttft_s, 50), _percentile(cell.ttft_s, 99)
    itl99 = _percentile(cell.itl_s, 99)
    row = {
        "target": cell.target,
        "streams": cell.streams,
        "requests": cell.requests,
        "errors": sum(cell.errors.values()),
        "events_per_s": cell.events / cell.window_s,
        "ttft_p50_ms": ttft50 * ms if ttft50 is not None else None,
        "ttft_p99_ms": ttft99 * ms if ttft99 is not None else None,
        "inter_event_p99_ms": itl99 * ms if itl99 is not None else None,
        "cpu_ms_per_1k_events": None,
        "rss_mib": None,
        "upstream_cpu_pct": 100 * cell.cpu_s["upstream"] / cell.window_s,
        "client_cpu_pct": 100 * cell.cpu_s["client"] / cell.window_s,
    }
    if "intermediary" in cell.cpu_s and cell.events:
        row["cpu_ms_per_1k_events"] = cell.cpu_s["intermediary"] / cell.events * 1e6
        row["rss_mib"] = cell.rss_bytes / 2**20
    return row


def add_deltas(row: dict, direct: dict | None) -> dict:
    """`added_*`: the row's latency figures minus the direct path's at the same concurrency."""
    for name in ("ttft_p50_ms", "ttft_p99_ms", "inter_event_p99_ms"):
        ours, base = row[name], direct[name] if direct else None
        row[f"added_{name}"] = None if ours is None or base is None else ours - base
    return row


RATIO_KEYS = (
    "added_ttft_p50_ms",
    "added_ttft_p99_ms",
    "added_inter_event_p99_ms",
    "cpu_ms_per_1k_events",
    "rss_mib",
)
COLUMNS = (
    ("streams", "streams", "{}"),
    ("target", "target", "{}"),
    ("requests", "req", "{}"),
    ("errors", "err", "{}"),
    ("events_per_s", "events/s", "{:.0f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.1f}"),
    ("added_ttft_p50_ms", "+TTFT p50 ms", "{:+.2f}"),
    ("added_ttft_p99_ms", "+TTFT p99 ms", "{:+.2f}"),
    ("added_inter_event_p99_ms", "+inter-event p99 ms", "{:+.2f}"),
    ("cpu_ms_per_1k_events", "CPU ms/1k events", "{:.0f}"),
    ("rss_mib", "RSS MiB", "{:.0f}"),
    ("upstream_cpu_pct", "upstream CPU %", "{:.0f}"),
    ("client_cpu_pct", "client CPU %", "{:.0f}"),
)


def ratio_row(proxy: dict, nginx: dict) -> dict:
    """The proxy's figures divided by nginx's (only where nginx's figure is positive)."""
    row = {key: None for key, _, _ in COLUMNS}
    row.update(streams=proxy["streams"], target="proxy ÷ nginx")
    for key in RATIO_KEYS:
        if proxy[key] is not None and nginx[key] is not None and min(proxy[key], nginx[key]) > 0:
            row[key] = proxy[key] / nginx[key]
    return row


def markdown(rows: Sequence[dict]) -> str:
    lines = [
        "| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        ratio = row["target"] == "proxy ÷ nginx"
        cells = []
        for key, _, fmt in COLUMNS:
            value = row.get(key)
            if value is None:
                cells.append("—")
            elif ratio and key in RATIO_KEYS:
                cells.append(f"×{value:.1f}")
            else:
                cells.append(fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(cells: Sequence[CellResult]) -> list[dict]:
    rows = []
    for streams in sorted({c.streams for c in cells}):
        measured = {c.target: figures(c) for c in cells if c.streams == streams}
        direct = measured.get("direct")
        measured = {
            t: add_deltas(measured[t], None if t == "direct" else direct)
            for t in TARGETS
            if t in measured
        }
        rows.extend(measured.values())
        if "proxy" in measured and "nginx" in measured:
            rows.append(ratio_row(measured["proxy"], measured["nginx"]))
    return rows


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--streams", default="1,64", help="concurrent streams per cell, e.g. 1,64,256"
    )
    parser.add_argument(
        "--duration",
        type=parse_duration,
        default=12.0,
        help="measured window per cell (default 12s)",
    )
    parser.add_argument(
        "--warmup",
        type=parse_duration,
        default=2.0,
        help="unmeasured lead-in per cell (default 2s)",
    )
    parser.add_argument("--tokens", type=int, default=64, help="content events per stream")
    parser.add_argument("--targets", default=",".join(TARGETS), help="a subset of the default")
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--profile", type=Path, help="py-spy the proxy's cells into FILE; print CPU by layer"
    )
    args = parser.parse_args(argv)
    args.streams = [int(s) for s in args.streams.split(",")]
    args.targets = [t for t in TARGETS if t in args.targets.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if "nginx" in args.targets and not shutil.which(args.nginx):
        sys.exit(
            f"{args.nginx} not found: apt-get install -y nginx-light, or --targets without nginx"
        )
    cells: list[CellResult] = []
    profiles: list[tuple[CellResult, Counter[str]]] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="proxy-overhead-")))
        up_port, started = start_upstream(tmp)
        upstream = stack.enter_context(started)
        ports = {"direct": up_port}
        watched: dict[str, list[int]] = {"direct": []}
        if "nginx" in args.targets:
            port, nginx = start_nginx(args.nginx, up_port, tmp)
            master = stack.enter_context(nginx)
            ports["nginx"], watched["nginx"] = port, process_tree(master.pid)[1:]  # the worker
        for target, meter in (("relay", False), ("relay+meter", True)):
            if target in args.targets:
                port, relay = start_relay(up_port, tmp, meter)
                ports[target], watched[target] = port, process_tree(stack.enter_context(relay).pid)
        if "proxy" in args.targets:
            port, proxy = start_proxy(up_port, tmp)
            ports["proxy"], watched["proxy"] = port, process_tree(stack.enter_context(proxy).pid)
        if "proxy+otlp" in args.targets:
            sink_port, sink = start_otlp_sink(tmp)
            stack.enter_context(sink)
            port, proxy = start_proxy(up_port, tmp, otlp=sink_port)
            pids = process_tree(stack.enter_context(proxy).pid)
            ports["proxy+otlp"], watched["proxy+otlp"] = port, pids
        client = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        for streams in args.streams:
            for target in args.targets:
                url = f"http://127.0.0.1:{ports[target]}/v1/chat/completions"
                watch = {"upstream": [upstream.pid]}
                if watched[target]:
                    watch["intermediary"] = watched[target]
                print(f"… {target} × {streams} streams", file=sys.stderr, flush=True)
                cell = Cell(target, url, streams, args.tokens, args.warmup, args.duration, watch)
                sampler = None
                if args.profile and target.startswith("proxy"):
                    pid = watched[target][0]
                    sampler = record_later(pid, args.warmup, args.duration, args.profile)
                cells.append(client.submit(run_cell, cell).result())
                if sampler is not None:
                    sampler.join()
                    profiles.append((cells[-1], by_layer(args.profile.read_text().splitlines())))
                if cells[-1].errors:
                    print(f"  errors: {cells[-1].errors}", file=sys.stderr, flush=True)
    rows = report(cells)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        cell_summaries = [_cell_summary(c) for c in cells]
        print(json.dumps({"settings": settings, "rows": rows, "cells": cell_summaries}, indent=2))
    else:
        print(
            f"upstream: first token 50 ms, then every 10 ms, {args.tokens} tokens/stream; "
            f"{args.duration:g}s measured per cell after {args.warmup:g}s warm-up\n"
        )
        print(markdown(rows))
    for cell, samples in profiles:
        cpu = figures(cell)["cpu_ms_per_1k_events"]
        print(f"\n{cell.target} × {cell.streams} streams, CPU by layer ({args.profile}):\n")
        print(layers_markdown(samples, cpu))


def _cell_summary(cell: CellResult) -> dict:
    """A cell without its raw sample lists (which go into the percentiles above)."""
    summary = asdict(cell)
    summary["ttft_samples"] = len(summary.pop("ttft_s"))
    summary["inter_event_samples"] = len(summary.pop("itl_s"))
    return summary


if __name__ == "__main__":
    main()
