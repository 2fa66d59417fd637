"""Proxy overhead: one scripted upstream reached directly, via nginx, a Python relay and the proxy.

One run measures the same fast upstream (bench/sse_upstream.py, its own process: first token
at 50 ms, then one every 10 ms) reached six ways:

- direct: the baseline every "added" figure is taken against;
- nginx: Debian's nginx, one worker, `proxy_buffering off`, HTTP/1.1 keep-alive upstream — the
  reference for what a non-Python pass-through costs;
- relay: bench/relay_floor.py, a raw TCP relay on uvloop — the floor for a Python pass-through;
- relay+meter: the same relay running SSEParser + StreamMeter on every response read — the
  floor plus the proxy's own parsing and metering;
- proxy: `python -m latency_proxy` with its default settings (no OTLP endpoint: spans are
  built, not exported);
- proxy+otlp: the same exporting its spans over OTLP/HTTP as deploy/ configures it (metrics
  scraped, not pushed) to bench/otlp_sink.py, which discards them — what tracing costs;
- proxy-pure, proxy-pure+otlp: the same two with LATENCY_PROXY_PURE=1, the hot path's .py
  files in place of its compiled extensions (latency_proxy/base/build.py) — what compiling
  saves. The proxy targets run whatever this tree has: build it in place first
  (`python setup.py build_ext --inplace`), or "proxy" is pure too and says so in the JSON.

A cell is one target × concurrency × tokens per answer (`--tokens 1` is one non-streaming
JSON answer, the classifier/embedding shape; more is an SSE stream of that many content
events). `--repeat N` runs every cell N times, interleaved (all cells once, then all again:
ABAB), so drift on a shared box spreads over all targets alike; each figure against direct or
nginx is taken within one repeat, then summarised over repeats (bench/overhead_figures.py).
Where the box allows, the load client, the upstream and the OTLP sink run on one CPU and the
intermediary on another (taskset), so they do not take turns on a core.

    python bench/proxy_overhead.py [--streams 64] [--tokens 1,8,64,256] [--repeat 6]
                                   [--duration 8s] [--profile DIR] [--out FILE]

Every run writes its raw JSON (command, commit, settings, every cell of every repeat, the
summaries, the goals, the profiles) to bench/results/ (or --out); bench/performance_tables.py
turns committed files into the tables of docs/performance.md. --profile DIR adds one py-spy
pass over each proxy cell after the repeats (not counted in the figures: py-spy slows the
proxy) and prints where its CPU went, by layer (bench/profile_layers.py).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson
import overhead_figures as figures  # bench/, beside this script
import performance_tables as tables
from overhead_client import Cell, CellResult, process_tree, run_cell
from profile_layers import by_layer, parts, record_later

from latency_proxy.base import build
from latency_proxy.base.units import parse_duration
from loadgen.stack.processes import free_port, running

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
TARGETS = (
    "direct",
    "nginx",
    "relay",
    "relay+meter",
    "proxy",
    "proxy+otlp",
    "proxy-pure",
    "proxy-pure+otlp",
)
PROXIES = {  # target: (exports over OTLP, hot path pure)
    "proxy": (False, False),
    "proxy+otlp": (True, False),
    "proxy-pure": (False, True),
    "proxy-pure+otlp": (True, True),
}

NGINX_CONF = """\
worker_processes {workers};
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log {tmp}/access.log;  # one line per request, as the proxy writes its own
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


class Pinning:
    """CPU affinity: load side (client, upstream, sink) on one CPU, the intermediary on
    another; nothing pinned when the box has one CPU, taskset is missing or --no-pin."""

    def __init__(self, enabled: bool) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        self.active = enabled and len(cpus) >= 2 and shutil.which("taskset") is not None
        self.load = (cpus[0],) if self.active else None
        self.intermediary = (cpus[1],) if self.active else None

    @staticmethod
    def _prefix(cpus: tuple[int, ...] | None) -> list[str]:
        return ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []

    def load_side(self, args: list[str]) -> list[str]:
        return self._prefix(self.load) + args

    def under_test(self, args: list[str]) -> list[str]:
        return self._prefix(self.intermediary) + args

    def describe(self) -> dict:
        return {"load": self.load, "intermediary": self.intermediary}


# --- the processes under test ---------------------------------------------------------------


def start_upstream(tmp: Path, pin: Pinning):
    port = free_port()
    args = pin.load_side([sys.executable, str(HERE / "sse_upstream.py"), "--port", str(port)])
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", tmp / "upstream.log", cwd=REPO)


def start_nginx(nginx: str, upstream: int, tmp: Path, pin: Pinning, workers: int = 1):
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream, port=port, workers=workers))
    args = pin.under_test([nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)])
    return port, running(args, f"http://127.0.0.1:{port}/v1/models", tmp / "nginx.log", cwd=REPO)


def start_relay(upstream: int, tmp: Path, meter: bool, pin: Pinning):
    port = free_port()
    args = [
        *pin.under_test([]),
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


def start_otlp_sink(tmp: Path, pin: Pinning):
    port = free_port()
    args = pin.load_side([sys.executable, str(HERE / "otlp_sink.py"), "--port", str(port)])
    return port, running(args, f"http://127.0.0.1:{port}/", tmp / "otlp-sink.log", cwd=REPO)


def start_proxy(
    upstream: int,
    tmp: Path,
    pin: Pinning,
    otlp: int | None = None,
    workers: int = 1,
    admin: int | None = None,
    pure: bool = False,
):
    """The proxy; with `otlp` (a sink's port) exporting spans as deploy/ has it; `workers`
    processes (--workers); its admin port `admin` when the caller reads /metrics; `pure`:
    the hot path's .py files even where this tree has it compiled."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env[build.PURE_ENV] = "1" if pure else ""
    if otlp is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
        }
    port, admin = free_port(), admin or free_port()
    args = [
        *pin.under_test([]),
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
        "--workers",
        str(workers),
    ]
    log = tmp / f"proxy-{workers}w{'-otlp' if otlp is not None else ''}{'-pure' * pure}.log"
    return port, running(args, f"http://127.0.0.1:{admin}/healthz", log, cwd=REPO, env=env)


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="64", help="concurrent streams per cell, e.g. 1,64")
    parser.add_argument(
        "--tokens",
        default="64",
        help="tokens per answer, e.g. 1,8,64,256 (1: one non-streaming JSON answer)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="interleaved repeats of every cell")
    parser.add_argument(
        "--duration", type=parse_duration, default=8.0, help="measured window per cell (8s)"
    )
    parser.add_argument(
        "--warmup", type=parse_duration, default=2.0, help="unmeasured lead-in per cell (2s)"
    )
    parser.add_argument("--targets", default=",".join(TARGETS), help="a subset of the default")
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--out", type=Path, help="the raw JSON (default bench/results/…)")
    parser.add_argument("--json", action="store_true", help="print the JSON, not the tables")
    parser.add_argument(
        "--profile", type=Path, help="one py-spy pass per proxy cell into DIR; CPU by layer"
    )
    args = parser.parse_args(argv)
    args.streams = [int(s) for s in args.streams.split(",")]
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.targets = [t for t in TARGETS if t in args.targets.split(",")]
    return args


def _git(*command: str) -> str:
    out = subprocess.run(["git", *command], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip()


class Targets:
    """The processes under test, started once for the whole run."""

    def __init__(self, stack: contextlib.ExitStack, args: argparse.Namespace, pin: Pinning):
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="proxy-overhead-")))
        up_port, started = start_upstream(tmp, pin)
        self.upstream_pid = stack.enter_context(started).pid
        self.ports = {"direct": up_port}
        self.pids: dict[str, list[int]] = {"direct": []}
        if "nginx" in args.targets:
            port, nginx = start_nginx(args.nginx, up_port, tmp, pin)
            master = stack.enter_context(nginx)
            self.ports["nginx"], self.pids["nginx"] = port, process_tree(master.pid)[1:]
        for target, meter in (("relay", False), ("relay+meter", True)):
            if target in args.targets:
                port, relay = start_relay(up_port, tmp, meter, pin)
                self._add(target, port, stack.enter_context(relay).pid)
        sink_port = None
        for target, (otlp, pure) in PROXIES.items():
            if target not in args.targets:
                continue
            if otlp and sink_port is None:
                sink_port, sink = start_otlp_sink(tmp, pin)
                stack.enter_context(sink)
            port, proxy = start_proxy(
                up_port, tmp, pin, otlp=sink_port if otlp else None, pure=pure
            )
            self._add(target, port, stack.enter_context(proxy).pid)

    def _add(self, target: str, port: int, pid: int) -> None:
        self.ports[target], self.pids[target] = port, process_tree(pid)

    def watch(self, target: str) -> dict[str, list[int]]:
        watch = {"upstream": [self.upstream_pid]}
        if self.pids[target]:
            watch["intermediary"] = self.pids[target]
        return watch


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if "nginx" in args.targets and not shutil.which(args.nginx):
        sys.exit(
            f"{args.nginx} not found: apt-get install -y nginx-light, or --targets without nginx"
        )
    pin = Pinning(not args.no_pin)
    source = _source()  # before anything runs: what the processes under test start from
    shapes = [(streams, tokens) for streams in args.streams for tokens in args.tokens]
    runs: list[dict] = []
    profiles: list[dict] = []
    with contextlib.ExitStack() as stack:
        targets = Targets(stack, args, pin)
        client = stack.enter_context(
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        )

        def measure(target: str, streams: int, tokens: int) -> CellResult:
            url = f"http://127.0.0.1:{targets.ports[target]}/v1/chat/completions"
            cell = Cell(
                target,
                url,
                streams,
                tokens,
                tokens > 1,
                args.warmup,
                args.duration,
                targets.watch(target),
                pin.load,
            )
            result = client.submit(run_cell, cell).result()
            if result.errors:
                print(f"  errors: {result.errors}", file=sys.stderr, flush=True)
            return result

        for repeat in range(args.repeat):
            for streams, tokens in shapes:
                for target in args.targets:
                    print(
                        f"… repeat {repeat + 1}/{args.repeat}: {target} × {streams} streams × "
                        f"{tokens} tokens",
                        file=sys.stderr,
                        flush=True,
                    )
                    runs.append(figures.row(measure(target, streams, tokens), repeat))
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for streams, tokens in shapes:
                for target in (t for t in args.targets if t.startswith("proxy")):
                    raw = args.profile / f"{target}-{streams}x{tokens}.raw"
                    print(f"… py-spy: {target} × {streams} × {tokens}", file=sys.stderr)
                    pid = targets.pids[target][0]
                    sampler = record_later(pid, args.warmup, args.duration, raw)
                    result = figures.row(measure(target, streams, tokens), -1)
                    sampler.join()
                    lines = raw.read_text().splitlines()
                    layers = {"layers": by_layer(lines), "parts": parts(lines), "raw": str(raw)}
                    profiles.append({**result, **layers})
    result = assemble(args, argv, pin, source, runs, profiles)
    out = args.out or RESULTS / f"overhead-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"raw figures: {out}", file=sys.stderr)
    if args.json:
        sys.stdout.write(out.read_text())
    else:
        print(tables.everything(result))


def _source() -> dict:
    """The commit, and whether tracked files differ from it."""
    return {
        "commit": _git("rev-parse", "--short=12", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


def assemble(
    args, argv, pin: Pinning, source: dict, runs: list[dict], profiles: list[dict]
) -> dict:
    """The run's JSON: how it was made, every cell of every repeat, and what they sum to."""
    figures.compare(runs)
    fits = figures.fit(runs)
    summary = figures.summarise(runs, fits)
    command = ["python", "bench/proxy_overhead.py", *(sys.argv[1:] if argv is None else argv)]
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "out", "profile")}
    return {
        "command": shlex.join(command),
        **source,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "pinning": pin.describe()},
        "hot_path": build.running(),  # what "proxy" ran; "proxy-pure" is pure whatever this says
        "settings": settings,
        "runs": runs,
        "fits": fits,
        "summary": summary,
        "goals": [
            figures.judge(g, summary)
            for s in args.streams
            for build in ("proxy", "proxy-pure")
            if build in args.targets
            for g in figures.goals(s, build)
        ],
        "profiles": profiles,
    }


if __name__ == "__main__":
    main()
