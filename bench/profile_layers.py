"""Where a process's CPU goes, by layer: py-spy samples grouped by the code on top of the stack.

A flame graph of the proxy answers "which function"; the data-plane question is "which
layer": the event loop and its syscalls (what any Python pass-through pays, the relay floor),
uvicorn's and the upstream client's HTTP framing, the proxy's own per-event work (relay, SSE
parser, meter, usage filter) and its per-request bookkeeping (spans, metrics, the log line). Each
sample is charged to the layer of its innermost Python frame; a sample whose innermost frame
is the event loop's `run` is time in uvloop's C code (epoll, socket reads and writes,
callbacks) with no Python frame above it.

The compiled hot path (mypyc, latency_proxy/base/build.py) has no Python frames, so py-spy
records with `--native`: a compiled function's C symbol (`CPyDef_sse___SSEParser___feed`)
is read back as the Python function it was compiled from (`SSEParser.feed` in
latency_proxy/measure/sse.py), and every other native frame (libc, the interpreter, uvloop's
C) is dropped, so C time is charged to the innermost Python or compiled frame above it, as
it is in a pure process.

    python bench/profile_layers.py PROFILE.raw         # a `py-spy record --format raw` file
    python bench/proxy_overhead.py --targets proxy --profile proxy.raw   # records one

py-spy is not a dependency of the project: `.venv/bin/pip install py-spy` (it reads the
process from outside, so the proxy runs unchanged; it needs ptrace, which root has).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from latency_proxy.base.build import COMPILED

_FRAME_FILE = re.compile(r"\(([^:()]+):\d+\)$")
LOOP_C = "event loop: uvloop C (epoll, socket reads/writes, callbacks)"
PER_EVENT = "proxy per event: relay, SSE parser, meter, usage filter"
PER_REQUEST = "proxy per request: routing, headers, spans, metrics, log line"
UPSTREAM = "upstream client: connection, httptools callbacks, pool"

# first match wins: (file path prefix or module file, layer)
LAYERS: tuple[tuple[str, str], ...] = (
    ("asyncio/runners.py", LOOP_C),
    ("uvloop/", LOOP_C),
    ("asyncio/", "event loop: asyncio Python (tasks, futures)"),
    ("uvicorn/", "uvicorn: HTTP server, ASGI send (the client socket write is charged here)"),
    ("latency_proxy/upstream/connection.py", UPSTREAM),
    ("latency_proxy/upstream/pool.py", UPSTREAM),
    ("latency_proxy/server/writers.py", PER_EVENT),  # ClientWriter: the direct body write
    ("latency_proxy/server/http_protocol.py", PER_EVENT),  # resume_writing, on each drained buffer
    ("latency_proxy/forwarding/relay.py", PER_EVENT),
    ("latency_proxy/measure/sse.py", PER_EVENT),
    ("latency_proxy/measure/meter.py", PER_EVENT),
    ("latency_proxy/measure/event_shape.py", PER_EVENT),
    ("latency_proxy/forwarding/usage_filter.py", PER_EVENT),
    ("latency_proxy/server/write_watch.py", PER_EVENT),
    ("latency_proxy/", PER_REQUEST),
    ("opentelemetry/", PER_REQUEST),
    # py-spy names site-packages files from the package down: OpenTelemetry's SDK modules
    ("trace/", PER_REQUEST),
    ("metrics/", PER_REQUEST),
    ("attributes/", PER_REQUEST),
    ("context/", PER_REQUEST),
    ("prometheus_client/", PER_REQUEST),
    ("logging/", PER_REQUEST),
)
OTHER = "other (standard library, orjson, …)"

# the per-request work, counted inclusively (a sample counts for every part on its stack):
# (part, function as py-spy names it, file) — file matched as a path suffix
PARTS: tuple[tuple[str, str, str], ...] = (
    (
        "the request's task (forward.Forwarder.__call__)",
        "Forwarder.__call__",
        "latency_proxy/forwarding/forward.py",
    ),
    ("starting the SERVER span", "SpanWriter.start_server", "latency_proxy/telemetry/spans.py"),
    ("starting the CLIENT span", "SpanWriter.start_client", "latency_proxy/telemetry/spans.py"),
    (
        "writing the record (RequestWriter.finish)",
        "RequestWriter.finish",
        "latency_proxy/telemetry/request_writer.py",
    ),
    (
        "— the meter's figures (StreamMeter.finish)",
        "StreamMeter.finish",
        "latency_proxy/measure/meter.py",
    ),
    ("— metric observations", "MetricsWriter.record", "latency_proxy/telemetry/metrics.py"),
    ("— ending the spans", "SpanWriter.end", "latency_proxy/telemetry/spans.py"),
    ("— the log line", "LogWriter.write", "latency_proxy/telemetry/access_log.py"),
    ("uvicorn's request cycle (innermost frame in uvicorn)", "", "uvicorn/"),
)
_FRAME = re.compile(r"^(\S+) \(([^()]+):\d+\)$")


_NATIVE = re.compile(r"^CPy(?:Def|Py)_(\w+) \([^():]+\)$")  # a mypyc function's symbol


def _prefixes() -> list[tuple[str, str]]:
    """(symbol prefix, source path) for every compiled module, longest prefix first: mypyc
    names a module by its last dotted parts (more of them where the last is not unique)."""
    out = []
    for name in COMPILED:
        parts = name.split(".")
        path = "/".join(parts) + ".py"
        out += [("___".join(parts[i:]) + "___", path) for i in range(len(parts))]
    return sorted(out, key=lambda item: -len(item[0]))


_COMPILED_PREFIXES = _prefixes()


def python_frames(stack: str) -> list[str]:
    """A raw stack's frames as Python frames: a compiled function's symbol read back as the
    function and file it was compiled from, every other native frame left out."""
    out: list[str] = []
    for frame in stack.split(";"):
        native = _NATIVE.match(frame)
        if native is None:
            found = _FRAME_FILE.search(frame)  # C frames with debug info name a .c file
            if found and found.group(1).endswith(".py"):
                out.append(frame)
            continue
        symbol = native.group(1)
        for prefix, path in _COMPILED_PREFIXES:
            if symbol.startswith(prefix):
                function = symbol[len(prefix) :].replace("___", ".")
                python = f"{function} ({path}:0)"
                if not out or out[-1] != python:  # the CPyPy_ wrapper, then its CPyDef_
                    out.append(python)
                break
    return out


def layer_of(frame: str) -> str:
    """The layer of one py-spy frame, `function (path/to/file.py:line)`."""
    found = _FRAME_FILE.search(frame)
    path = found.group(1) if found else frame
    for prefix, layer in LAYERS:
        if path.startswith(prefix) or f"/{prefix}" in path:
            return layer
    return OTHER


def by_layer(raw_lines: Iterable[str]) -> Counter[str]:
    """Samples per layer from py-spy's raw format: `frame;frame;…;innermost COUNT` per line."""
    samples: Counter[str] = Counter()
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            frames = python_frames(stack)
            samples[layer_of(frames[-1]) if frames else OTHER] += int(count)
    return samples


def parts(raw_lines: Iterable[str]) -> dict[str, int]:
    """Samples per PARTS entry (inclusive), plus `total`: all samples of the profile."""
    counts = dict.fromkeys((name for name, _, _ in PARTS), 0)
    total = 0
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not (stack and count.isdigit()):
            continue
        n = int(count)
        total += n
        frames = [_FRAME.match(frame) for frame in python_frames(stack)]
        found = [(m.group(1), m.group(2)) for m in frames if m]
        for name, function, file in PARTS:
            if function == "":  # by the innermost frame only
                hit = bool(found) and (file in found[-1][1])
            else:
                hit = any(f == function and path.endswith(file) for f, path in found)
            if hit:
                counts[name] += n
    counts["total"] = total
    return counts


def markdown(samples: Counter[str], cpu_us_per_event: float | None = None) -> str:
    total = sum(samples.values()) or 1
    head = "| layer | share of samples |" + (" µs/event |" if cpu_us_per_event else "")
    rule = "|---|---|" + ("---|" if cpu_us_per_event else "")
    rows = [head, rule]
    for layer, n in samples.most_common():
        share = n / total
        row = f"| {layer} | {share:.0%} |"
        if cpu_us_per_event:
            row += f" {share * cpu_us_per_event:.0f} |"
        rows.append(row)
    return "\n".join(rows)


def record_later(pid: int, delay: float, duration: float, out: Path) -> threading.Thread:
    """Start `py-spy record` on pid after delay (the cell's warm-up), for duration seconds."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        sys.exit("--profile needs py-spy: .venv/bin/pip install py-spy")
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(duration)))]
    command += ["--rate", "200", "--format", "raw", "--native", "--output", str(out)]

    def run() -> None:
        time.sleep(delay)
        subprocess.run(command, check=True, capture_output=True)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    print(markdown(by_layer(Path(sys.argv[1]).read_text().splitlines())))
