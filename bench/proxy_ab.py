"""The proxy's CPU per request at two commits, side by side: is a change cheaper?

Each revision is exported (`git archive`) into a temporary directory and started as its own
proxy process, both against one bench/sse_upstream.py; then every round loads A and B in
turn (ABBA: the order flips each round, so drift on a shared box falls on both alike) with
bench/overhead_client.py's closed-loop client, and takes each proxy's CPU (user + system,
psutil) over the measured window divided by the requests completed in it. The ratio B ÷ A
is taken within each round and summarised as its median, range and the (loadgen.analysis.stats)
order-statistic 95% interval of that median, as bench/overhead_figures.py summarises).

    python bench/proxy_ab.py REV_A REV_B [--tokens 1] [--streams 64] [--rounds 6]
                             [--duration 4s] [--warmup 1s] [--otlp] [--json]

--tokens 1 is one non-streaming JSON answer (the per-request cost nearly alone), more a
stream of that many events. --otlp exports the spans over OTLP/HTTP to bench/otlp_sink.py
(as proxy_overhead.py's `proxy+otlp`). Pinned as proxy_overhead.py pins: the load side on
one CPU, the proxies on the other.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from overhead_client import Cell, process_tree, run_cell  # bench/, beside this script
from overhead_figures import spread
from proxy_overhead import Pinning, start_otlp_sink, start_upstream

from latency_proxy.base.units import parse_duration
from loadgen.stack.processes import free_port, running

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def export(rev: str, into: Path) -> tuple[str, Path]:
    """The revision's tree in a directory of its own, and its short commit."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=12", rev],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = into / commit
    tree.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return commit, tree


def start_proxy(
    tree: Path,
    upstream: int,
    tmp: Path,
    pin: Pinning,
    otlp: int | None,
    before: Path | None = None,
    extra_env: dict[str, str] | None = None,
):
    """The proxy from `tree` (first on PYTHONPATH, after `before` when given: a folder with
    a sitecustomize module), its default settings, `extra_env` added to its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([*([str(before)] if before else []), str(tree)])
    env |= extra_env or {}
    if otlp is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
        }
    port, admin = free_port(), free_port()
    args = pin.under_test([sys.executable, "-m", "latency_proxy"])
    args += ["--upstream", f"http://127.0.0.1:{upstream}", "--host", "127.0.0.1"]
    args += ["--port", str(port), "--admin-port", str(admin)]
    ready = f"http://127.0.0.1:{admin}/healthz"
    return port, running(args, ready, tmp / f"{tree.name}.log", cwd=tree, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the revision to compare against (e.g. main, HEAD~1)")
    parser.add_argument("b", help="the revision under test (e.g. HEAD)")
    parser.add_argument("--tokens", type=int, default=1, help="1: one JSON answer")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=parse_duration, default=4.0)
    parser.add_argument("--warmup", type=parse_duration, default=1.0)
    parser.add_argument("--otlp", action="store_true", help="export spans over OTLP/HTTP")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    pin = Pinning(not args.no_pin)
    per_request: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="proxy-ab-")))
        trees = dict(export(rev, tmp) for rev in (args.a, args.b))
        if len(trees) == 1:
            sys.exit("the two revisions are one commit")
        up_port, upstream = start_upstream(tmp, pin)
        up_pid = stack.enter_context(upstream).pid
        sink = None
        if args.otlp:
            sink, started = start_otlp_sink(tmp, pin)
            stack.enter_context(started)
        proxies = {}
        for commit, tree in trees.items():
            port, proxy = start_proxy(tree, up_port, tmp, pin, sink)
            proxies[commit] = (port, process_tree(stack.enter_context(proxy).pid))
            per_request[commit] = []
        client = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        order = list(trees)
        for n in range(args.rounds):
            for commit in order if n % 2 == 0 else order[::-1]:
                port, pids = proxies[commit]
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                watch = {"upstream": [up_pid], "intermediary": pids}
                cell = Cell(
                    commit, url, args.streams, args.tokens, args.tokens > 1,
                    args.warmup, args.duration, watch, pin.load,
                )  # fmt: skip
                result = client.submit(run_cell, cell).result()
                if result.errors:
                    print(f"  {commit} errors: {result.errors}", file=sys.stderr)
                us = result.cpu_s["intermediary"] / max(1, result.completed) * 1e6
                per_request[commit].append(us)
                print(f"round {n + 1}: {commit} {us:.0f} µs/request", file=sys.stderr)
    a, b = order
    ratios = [y / x for x, y in zip(per_request[a], per_request[b], strict=True)]
    summary = {
        "command": " ".join(sys.argv),
        "a": a,
        "b": b,
        "us_per_request": {commit: spread(values) for commit, values in per_request.items()},
        "ratio_b_a": spread(ratios),
        "rounds": {"us_per_request": per_request, "ratio_b_a": ratios},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for commit in order:
        shown = ", ".join(f"{v:.0f}" for v in per_request[commit])
        median = summary["us_per_request"][commit]["median"]
        print(f"{commit}: median {median:.0f} µs/request ({shown})")
    r = summary["ratio_b_a"]
    low, high = r["ci95"]
    bound = (
        "not bounded by this many rounds"
        if low is None or high is None
        else f"[{low:.3f}, {high:.3f}]"
    )
    print(
        f"B ÷ A per round: {', '.join(f'{x:.3f}' for x in ratios)}; median {r['median']:.3f}, "
        f"range {r['min']:.3f} – {r['max']:.3f}, 95% interval of the median {bound}"
    )


if __name__ == "__main__":
    main()
