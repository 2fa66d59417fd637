"""The embedded default: the simulator and the proxy as child processes on free loopback ports.

They run as separate processes so that their work does not disturb the client's clock
readings. Whatever happens (an error, Ctrl-C), everything started here is stopped on exit.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.processes import free_port, stop, wait_ready

PRESET = "llama-70b-awq-tp4-a100"
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Stack:
    direct: str  # the simulator's base URL
    proxy: str  # the proxy's base URL
    metrics: str  # the simulator's /metrics: vLLM's series and DCGM-style gauges
    proxy_metrics: str  # the proxy's admin /metrics


def _spawn(log_dir: Path, module: str, *args: str) -> subprocess.Popen:
    # output to a log file in the run directory: nobody reads a pipe, and a full one stalls
    with open(log_dir / f"{module.replace('.', '_')}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C is loadgen's to handle: it stops them last
        )


@contextlib.contextmanager
def stack(log_dir: Path, sim_args: tuple[str, ...] = ("--preset", PRESET)) -> Iterator[Stack]:
    """Start simulator, then proxy in front of it; yield their URLs; stop both."""
    log_dir.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen] = []
    try:
        sim_port = free_port()
        direct = f"http://127.0.0.1:{sim_port}"
        sim_cmd = (*sim_args, "--host", "127.0.0.1", "--port", str(sim_port))
        sim = _spawn(log_dir, "loadgen.sim", *sim_cmd)
        processes.append(sim)
        wait_ready(direct + "/health", sim, READY_TIMEOUT_S)
        proxy_port, admin_port = free_port(), free_port()
        proxy = _spawn(
            log_dir,
            "latency_proxy",
            "--upstream",
            direct,
            "--host",
            "127.0.0.1",
            "--port",
            str(proxy_port),
            "--admin-port",
            str(admin_port),
        )
        processes.append(proxy)
        wait_ready(f"http://127.0.0.1:{admin_port}/healthz", proxy, READY_TIMEOUT_S)
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        yield Stack(
            direct=direct,
            proxy=proxy_url,
            metrics=direct + "/metrics",
            proxy_metrics=f"http://127.0.0.1:{admin_port}/metrics",
        )
    finally:
        for process in reversed(processes):
            stop(process)
