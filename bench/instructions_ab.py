"""Compiled against pure in instructions, which a busy machine cannot blur.

CPU time on a shared 2-core box moves with everything else that runs (caches, clocks, the
scheduler); the number of instructions a piece of work executes does not. This runs one
streamed 64-token chat request's work inside the proxy without sockets — the SSE parser on
every read, the meter on every event, both spans started, the record written (metric
observations, spans ended, the log line to /dev/null) — N times in a child process under
valgrind's callgrind, twice (N1 and N2 requests), and takes the difference over N2 − N1
requests, so start-up and imports cancel out. Each build runs in its own child: "compiled"
as this tree is built, "pure" with LATENCY_PROXY_PURE=1.

    python bench/instructions_ab.py [--tokens 64] [--n 40,120]

Needs valgrind (apt-get install valgrind). Counts are instructions, not time: a compiled
instruction mix (fewer branches into the interpreter) runs faster per instruction, so the
ratio is a floor for the saving in time, not a measure of it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
_COLLECTED = re.compile(r"Collected : (\d+)")


def child(n: int, tokens: int) -> None:
    """n requests' work, as record_micro.Bookkeeping does it, the parser included."""
    sys.path.insert(0, str(HERE))
    from record_micro import Bookkeeping, stream_reads

    from latency_proxy.measure.meter import StreamMeter
    from latency_proxy.measure.sse import SSEParser
    from latency_proxy.telemetry import logs

    logs.configure("info", "json")  # the log line written, as record_micro does, to /dev/null
    logging.root.handlers[0].setStream(open(os.devnull, "w"))  # noqa: SIM115 - the whole run
    book = Bookkeeping(tokens)
    reads = list(stream_reads(tokens))
    for _ in range(n):
        exchange = book.start()
        parser, meter = SSEParser(), StreamMeter(exchange.t0)
        for t, data in reads:
            for event in parser.feed(data):
                meter.on_event(exchange.t0 + t, event)
        exchange.meter = meter
        book.finish(exchange)


def instructions(n: int, tokens: int, pure: bool) -> int:
    env = {**os.environ, "LATENCY_PROXY_PURE": "1" if pure else ""}
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
                sys.executable, __file__, "--child", str(n), "--tokens", str(tokens),
            ],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
    found = _COLLECTED.search(done.stderr)
    if found is None:
        sys.exit(f"callgrind said no total:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--n", default="40,120", help="the two request counts N1,N2")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.tokens)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found: apt-get install valgrind")
    low, high = (int(n) for n in args.n.split(","))
    builds = {"compiled": False, "pure": True}
    with ThreadPoolExecutor(4) as pool:  # counts do not depend on what else runs
        counts = {
            (build, n): pool.submit(instructions, n, args.tokens, pure)
            for build, pure in builds.items()
            for n in (low, high)
        }
        per_request = {
            build: (counts[build, high].result() - counts[build, low].result()) / (high - low)
            for build in builds
        }
    print(f"{args.tokens}-token streamed request, instructions per request ({low}→{high}):\n")
    print("| build | instructions per request | ÷ pure |")
    print("|---|---|---|")
    for build, count in per_request.items():
        print(f"| {build} | {count / 1e6:.2f} M | ×{count / per_request['pure']:.2f} |")


if __name__ == "__main__":
    main()
