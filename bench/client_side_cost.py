"""What owning the client side could save: uvicorn's request cycle against a raw protocol.

The proxy serves its main port with uvicorn (httptools, uvloop) and owns only the upstream
side. Before writing an own server protocol, this measures the most it could save: the same
non-streaming answer served by

- `raw`: bench/sse_upstream.py, an asyncio Protocol on httptools + uvloop, pre-built bytes
  (what an own client side would be at best: no ASGI, no task per request);
- `uvicorn`: uvicorn with httptools + uvloop and an ASGI app that reads the body and sends the
  same answer (what the proxy pays per request before its own work);

each its own process on its own CPU (taskset, where there are two), driven by
bench/overhead_client.py's closed-loop client (`--streams` concurrent requests, `--repeat`
interleaved repeats), with the server's CPU per request taken over each measured window.
The difference of the medians is uvicorn's per-request cost above the floor.

    python bench/client_side_cost.py [--streams 64] [--repeat 5] [--duration 5s] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson
from overhead_client import Cell, run_cell  # bench/, beside this script

from latency_proxy.base.units import parse_duration
from loadgen.stack.processes import free_port, running

HERE = Path(__file__).resolve().parent
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": " tok"}}],
        "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
    }
)
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]


async def app(scope, receive, send) -> None:
    """The smallest ASGI app that answers as the upstream does: read the body, answer."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})


def servers(pin: list[str]) -> dict[str, tuple[int, list[str]]]:
    raw, uvi = free_port(), free_port()
    upstream = [sys.executable, str(HERE / "sse_upstream.py"), "--port", str(raw), "--ttft", "0s"]
    uvicorn = [sys.executable, "-m", "uvicorn", "--app-dir", str(HERE), "client_side_cost:app"]
    uvicorn += ["--port", str(uvi), "--loop", "uvloop", "--http", "httptools"]
    uvicorn += ["--no-access-log", "--log-level", "warning"]
    return {"raw": (raw, [*pin, *upstream]), "uvicorn": (uvi, [*pin, *uvicorn])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--duration", type=parse_duration, default=5.0)
    parser.add_argument("--warmup", type=parse_duration, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    pinned = len(cpus) >= 2 and shutil.which("taskset") is not None
    pin = ["taskset", "-c", str(cpus[1])] if pinned else []
    per_request: dict[str, list[float]] = {"raw": [], "uvicorn": []}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="client-side-")))
        pids, ports = {}, {}
        for name, (port, command) in servers(pin).items():
            process = stack.enter_context(
                running(command, f"http://127.0.0.1:{port}/v1/models", tmp / f"{name}.log")
            )
            pids[name], ports[name] = process.pid, port
        client = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )
        for _ in range(args.repeat):
            for name in per_request:
                url = f"http://127.0.0.1:{ports[name]}/v1/chat/completions"
                cell = Cell(
                    name,
                    url,
                    args.streams,
                    1,
                    False,
                    args.warmup,
                    args.duration,
                    {"upstream": [pids[name]], "intermediary": [pids[name]]},
                    (cpus[0],) if pinned else None,
                )
                result = client.submit(run_cell, cell).result()
                per_request[name].append(result.cpu_s["intermediary"] / result.completed * 1e6)
    medians = {name: float(np.median(values)) for name, values in per_request.items()}
    figures = {
        "streams": args.streams,
        "repeats": args.repeat,
        "cpu_us_per_request": per_request,
        "median_us_per_request": medians,
        "uvicorn_above_raw_us": medians["uvicorn"] - medians["raw"],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.streams} streams, {args.repeat} interleaved repeats, CPU µs per request:\n")
    print("| server | median | range |\n|---|---|---|")
    for name, values in per_request.items():
        print(f"| {name} | {medians[name]:.0f} | {min(values):.0f} – {max(values):.0f} |")
    print(f"\nuvicorn above the raw protocol: {figures['uvicorn_above_raw_us']:.0f} µs/request")


if __name__ == "__main__":
    main()
