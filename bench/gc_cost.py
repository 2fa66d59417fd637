"""What Python's cyclic garbage collector costs the proxy, at its thresholds and at others.

The proxy freezes everything it built at startup (process/app.py), so full passes skip
the SDKs' and the interpreter's objects; what is left is the collector's passes over the
objects requests make. This starts one proxy per threshold setting against
bench/sse_upstream.py, loads it with bench/overhead_client.py's closed-loop client (one
non-streaming JSON answer per request by default: the per-request cost nearly alone), and
reads each generation's passes, their total and their longest pause from the proxy itself
(gc.callbacks, installed by a sitecustomize module this script writes, read on SIGUSR1;
the passes' CPU time, which other work on the machine cannot stretch). --tree runs another
checkout's proxy (a `git worktree` of an earlier commit) for a before and after.
Settings alternate (ABAB) over --rounds, so drift on the machine falls on all alike.

    python bench/gc_cost.py [--thresholds 700,10,10:10000,10,10] [--tokens 1]
                            [--streams 64] [--rounds 2] [--duration 6s] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from overhead_client import Cell, run_cell  # bench/, beside this script
from proxy_ab import start_proxy
from proxy_overhead import Pinning, start_upstream

from latency_proxy.base.units import parse_duration

REPO = Path(__file__).resolve().parent.parent
PROBE = """\
import gc, json, os, signal, time
_started, _passes, _serving = {}, {g: [0, 0.0, 0.0] for g in range(3)}, [False]
def _timed(phase, info):
    g = info["generation"]
    if not _serving[0]:  # only passes once the proxy froze its startup objects count
        _serving[0] = phase == "start" and gc.get_freeze_count() > 0  # walks the frozen
        if not _serving[0]:
            return
    if phase == "start":
        _started[g] = time.thread_time()
        return
    took = time.thread_time() - _started.pop(g, time.thread_time())
    passes = _passes[g]
    passes[0] += 1; passes[1] += took; passes[2] = max(passes[2], took)
def _dump(*_):
    with open(os.environ["GC_COST_OUT"], "w") as out:
        json.dump(_passes, out)
gc.set_threshold(*map(int, os.environ["GC_COST_THRESHOLD"].split(",")))
gc.callbacks.append(_timed)
signal.signal(signal.SIGUSR1, _dump)
"""


def measure(threshold: str, args: argparse.Namespace, upstream: int, tmp: Path, pin: Pinning):
    """One proxy at `threshold`, loaded for one cell: CPU µs per request, requests, passes
    and its RSS at the window's end."""
    out = tmp / "passes.json"
    probe = {"GC_COST_OUT": str(out), "GC_COST_THRESHOLD": threshold}
    port, started = start_proxy(args.tree, upstream, tmp, pin, None, tmp, probe)
    with started as proxy:
        cell = Cell(
            "proxy", f"http://127.0.0.1:{port}", args.streams, args.tokens, args.tokens > 1,
            args.warmup, args.duration, {"intermediary": [proxy.pid]}, pin.load,
        )  # fmt: skip
        result = run_cell(cell)
        os.kill(proxy.pid, signal.SIGUSR1)
        for _ in range(50):
            if out.exists():
                break
            time.sleep(0.1)
        passes = json.loads(out.read_text())
        out.unlink()
    cpu = result.cpu_s["intermediary"] / max(result.completed, 1) * 1e6
    return cpu, result.completed, passes, result.rss_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thresholds", default="700,10,10:10000,10,10", help="colon-separated")
    parser.add_argument("--tokens", type=int, default=1, help="1: one JSON answer")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=parse_duration, default=6.0)
    parser.add_argument("--warmup", type=parse_duration, default=1.0)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose proxy runs")
    args = parser.parse_args()
    pin = Pinning(enabled=True)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        (tmp / "sitecustomize.py").write_text(PROBE)
        upstream, upstream_process = start_upstream(tmp, pin)
        with upstream_process:
            print("| threshold | round | requests | CPU µs/request | gen 0 | gen 1 | gen 2 | "
                  "collector µs/request | longest pause | RSS |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|---|---|")
            for round_ in range(args.rounds):
                for threshold in args.thresholds.split(":"):
                    cpu, done, passes, rss = measure(threshold, args, upstream, tmp, pin)
                    total = sum(p[1] for p in passes.values())
                    longest = max(p[2] for p in passes.values())
                    gens = " | ".join(
                        f"{p[0]} in {p[1] * 1e3:.0f} ms" for _, p in sorted(passes.items())
                    )
                    print(
                        f"| {threshold} | {round_ + 1} | {done} | {cpu:.0f} | {gens} | "
                        f"{total / max(done, 1) * 1e6:.0f} | {longest * 1e3:.1f} ms | "
                        f"{rss / 2**20:.0f} MiB |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
