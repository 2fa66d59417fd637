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

from loadgen.stack.processes import free_port, running

PRESET = "llama-70b-awq-tp4-a100"
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Stack:
    direct: str  # the simulator's base URL
    proxy: str  # the proxy's base URL
    metrics: str  # the simulator's /metrics: vLLM's series and DCGM-style gauges
    proxy_metrics: str  # the proxy's admin /metrics


def _child(
    log_dir: Path, module: str, args: list[str], ready_url: str
) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """`python -m module ARGS`, its output in the run directory, ready at ready_url."""
    return running(
        [sys.executable, "-m", module, *args],
        ready_url,
        log_dir / f"{module.replace('.', '_')}.log",
        timeout_s=READY_TIMEOUT_S,
        new_session=True,  # a Ctrl-C is loadgen's to handle: it stops them last
    )


@contextlib.contextmanager
def stack(log_dir: Path, sim_args: tuple[str, ...] = ("--preset", PRESET)) -> Iterator[Stack]:
    """Start simulator, then proxy in front of it; yield their URLs; stop both (proxy first)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as started:
        sim_port = free_port()
        direct = f"http://127.0.0.1:{sim_port}"
        sim_cmd = [*sim_args, "--host", "127.0.0.1", "--port", str(sim_port)]
        started.enter_context(_child(log_dir, "loadgen.sim", sim_cmd, direct + "/health"))
        proxy_port, admin_port = free_port(), free_port()
        admin = f"http://127.0.0.1:{admin_port}"
        proxy_cmd = ["--upstream", direct, "--host", "127.0.0.1", "--port", str(proxy_port)]
        proxy_cmd += ["--admin-port", str(admin_port)]
        started.enter_context(_child(log_dir, "latency_proxy", proxy_cmd, admin + "/healthz"))
        yield Stack(
            direct=direct,
            proxy=f"http://127.0.0.1:{proxy_port}",
            metrics=direct + "/metrics",
            proxy_metrics=admin + "/metrics",
        )
