"""What the Locust engine costs per SSE event, next to loadgen's own client, in one run.

One simulator (`python -m loadgen.sim --ttft --itl`, its own process) serves both engines, one
after the other, each as one process with the same streams: `python -m loadgen.locust`
headless in Locust's single-process mode (gevent, geventhttpclient, Locust's own stats and
request events) and `python -m loadgen --concurrency` (asyncio on uvloop, aiohttp). Each runs
twice, short and long; the CPU per event is the difference of their CPU times (the child's
own rusage) over the difference of the events they read (output tokens: one event each), so
start-up, imports and the report are left out. Both runs' TTFT P50 error and lag P99 say
whether either was near its limit.

    .venv/bin/python bench/locust_cost.py [--streams 16] [--duration 12] [--tokens 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from servers import MODEL, add_stream_flags, fixed_simulator  # bench/, beside this script

from loadgen.runs import rundir


def engine_command(engine: str, url: str, streams: int, seconds: float, tokens: int, out: Path):
    workload = ["--input-tokens", "32", "--output-tokens", str(tokens), "--model", MODEL]
    workload += ["--out", str(out)]
    if engine == "locust":
        return [
            sys.executable, "-m", "loadgen.locust", "--headless", "--only-summary",
            "--host", url, "-u", str(streams), "-r", "100", "-t", f"{seconds:g}s",
            "--loglevel", "WARNING", *workload,
        ]  # fmt: skip
    return [
        sys.executable, "-m", "loadgen", "--target", url, "--concurrency", str(streams),
        "--duration", f"{seconds:g}s", "--warmup", "0s", "--no-progress", *workload,
    ]  # fmt: skip


def run_once(command: list[str], out: Path) -> tuple[float, int, dict]:
    """(CPU seconds, events read, the target's summary) of one engine process."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} … exited {process.returncode}")
    events = sum(r.output_tokens or 0 for r in rundir.read(out).records)
    (target,) = rundir.read_summary(out)["targets"].values()
    return usage.ru_utime + usage.ru_stime, events, target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--duration", type=int, default=12, help="the long run, whole seconds")
    add_stream_flags(p, ttft=0.05, itl=0.005, tokens=200)
    args = p.parse_args()
    rows = []
    with fixed_simulator(args.ttft, args.itl) as url, tempfile.TemporaryDirectory() as tmp:
        for engine in ("loadgen", "locust"):
            runs = []
            for seconds in (args.duration // 4, args.duration):
                out = Path(tmp) / f"{engine}-{seconds}"
                command = engine_command(engine, url, args.streams, seconds, args.tokens, out)
                runs.append(run_once(command, out))
            (cpu0, events0, _), (cpu1, events1, target) = runs
            per_event_us = (cpu1 - cpu0) / max(1, events1 - events0) * 1e6
            ttft = target["metrics"]["ttft_s"]["p50"]
            rows.append(
                (
                    engine,
                    per_event_us,
                    (events1 - events0) / (args.duration - args.duration // 4),
                    (ttft - args.ttft) * 1e3 if ttft is not None else float("nan"),
                    (target["client"]["send_lag_s"]["p99"] or 0) * 1e3,
                    (target["client"]["loop_lag_s"]["p99"] or 0) * 1e3,
                )
            )
    print(f"{args.streams} streams, {args.tokens} tokens each, one event per {args.itl * 1e3:g} ms")
    print("engine   CPU µs/event  events/s  TTFT P50 error ms  send lag P99 ms  loop lag P99 ms")
    for engine, us, rate, error, send, loop in rows:
        print(f"{engine:8} {us:12.1f}  {rate:8.0f}  {error:17.2f}  {send:15.2f}  {loop:15.2f}")


if __name__ == "__main__":
    main()
