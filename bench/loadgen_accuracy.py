"""loadgen's own measurement floor: TTFT/TPOT error, send lag and event-loop lag by stream count.

The upstream (`python -m loadgen.sim --ttft --itl`, its own process) sends the first token
exactly --ttft after each request arrives and then one every --itl, so every millisecond
loadgen reports beyond that is the floor of this client + loopback + upstream on this machine.

    .venv/bin/python bench/loadgen_accuracy.py [--streams 1,64,256,1000] [--duration 15]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import uvloop
from servers import MODEL, add_stream_flags, fixed_simulator  # bench/, beside this script

from loadgen.engine.runner import Runner
from loadgen.engine.schedule import Load, plan
from loadgen.engine.targets import Target
from loadgen.engine.workload import Lengths, Workload


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(url: str, streams: int, args: argparse.Namespace) -> dict[str, float]:
    rng = np.random.default_rng(0)
    workload = Workload("chat", Lengths(32, 32), Lengths(args.tokens, args.tokens), rng)
    target = Target("t", url)
    runner = Runner({"t": target}, {"t": MODEL}, workload, rng, 120.0)
    blocks = plan(["t"], 1, args.warmup, args.duration, None)
    cpu0, wall0 = cpu_s(), time.perf_counter()
    uvloop.run(runner.run(blocks, Load(concurrency=streams)))
    cpu, wall = cpu_s() - cpu0, time.perf_counter() - wall0
    done = [r for r in runner.result.records if r.excluded is None and r.ok]
    phase = runner.result.phases[0]
    lag = [v for at, v in runner.result.loop_lag if phase.start_at <= at <= phase.done_at]
    ttft_err = np.array([r.ttft_s - args.ttft for r in done]) * 1e3
    tpot_err = np.array([r.tpot_s - args.itl for r in done]) * 1e3
    send = np.array([r.send_lag_s for r in done]) * 1e3
    events = sum(len(r.itl_s) + 1 for r in runner.result.records)
    return {
        "streams": streams,
        "requests": len(done),
        "failed": sum(1 for r in runner.result.records if not r.ok),
        "ttft_err_p50": np.percentile(ttft_err, 50),
        "ttft_err_p99": np.percentile(ttft_err, 99),
        "tpot_err_p50": np.percentile(tpot_err, 50),
        "send_lag_p99": np.percentile(send, 99),
        "loop_lag_p50": np.percentile(lag, 50) * 1e3,
        "loop_lag_p99": np.percentile(lag, 99) * 1e3,
        "loop_lag_max": max(lag) * 1e3,
        "client_cpu": cpu / wall,
        "cpu_us_per_event": cpu / events * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,64,256,1000")
    add_stream_flags(parser, ttft=0.5, itl=0.1, tokens=32)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    args = parser.parse_args()
    columns = (
        "streams",
        "requests",
        "failed",
        "ttft_err_p50",
        "ttft_err_p99",
        "tpot_err_p50",
        "send_lag_p99",
        "loop_lag_p50",
        "loop_lag_p99",
        "loop_lag_max",
        "client_cpu",
        "cpu_us_per_event",
    )
    print(
        f"upstream: TTFT {args.ttft * 1e3:.0f} ms, {args.itl * 1e3:.0f} ms/token, "
        f"{args.tokens} tokens; errors and lags in ms; client_cpu in cores"
    )
    print(" ".join(f"{c:>16}" for c in columns))
    with fixed_simulator(args.ttft, args.itl) as url:
        for streams in (int(s) for s in args.streams.split(",")):
            row = measure(url, streams, args)
            print(
                " ".join(
                    f"{row[c]:>16.2f}" if isinstance(row[c], float) else f"{row[c]:>16}"
                    for c in columns
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
