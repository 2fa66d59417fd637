"""Child processes on loopback: a free port, a wait until the child answers, a clean stop.

The embedded stack, the benchmarks and the tests all start the simulator, the proxy and
other servers as child processes; one implementation keeps their start-up and shutdown
alike (a child that dies while starting is reported at once, with its exit code, instead of
after the whole timeout; SIGTERM first, so a proxy drains, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"


class NotReady(RuntimeError):
    """The child exited, or did not answer in time, before it was ready."""


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (the kernel's pick; the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """True when a GET of url returns 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(
    url: str, process: subprocess.Popen, timeout_s: float = 20.0, interval_s: float = 0.05
) -> None:
    """Poll url until it answers 200; raise NotReady if the child exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NotReady(f"{describe(process)} exited with {process.returncode} before ready")
        if answers(url):
            return
        time.sleep(interval_s)
    raise NotReady(f"{url} not ready after {timeout_s:.0f} s")


def stop(process: subprocess.Popen, timeout_s: float = 5.0, sig: int = signal.SIGTERM) -> int:
    """Send sig (a graceful shutdown), SIGKILL after timeout_s; reap; return the exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def describe(process: subprocess.Popen) -> str:
    """The child's command, short: `python -m loadgen.sim` reads as `loadgen.sim`."""
    given = process.args
    listed = [given] if isinstance(given, (str, bytes, os.PathLike)) else list(given)
    args = [os.fsdecode(a) for a in listed]
    if len(args) > 2 and args[1] == "-m":
        return args[2]
    return " ".join(args[:3])


@contextlib.contextmanager
def running(
    args: Sequence[str],
    ready_url: str,
    log: Path | None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 20.0,
    new_session: bool = False,
) -> Iterator[subprocess.Popen]:
    """A child process, yielded once ready_url answers; stopped on exit.

    Its output goes to `log` (nobody reads a pipe, and a full one stalls the child), or to
    this process's own stdout and stderr when log is None. A child that fails to start
    raises NotReady, with the tail of its log.
    """
    with contextlib.ExitStack() as files:
        out = files.enter_context(log.open("wb")) if log is not None else None
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=new_session,
        )
    try:
        try:
            wait_ready(ready_url, process, timeout_s)
        except NotReady as exc:
            tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
            raise NotReady(f"{exc}; log: {tail}" if tail else str(exc)) from None
        yield process
    finally:
        stop(process)


@contextlib.contextmanager
def simulator(*args: str, log: Path | None = None, timeout_s: float = 20.0) -> Iterator[str]:
    """`python -m loadgen.sim ARGS` on a free loopback port; yields its base URL."""
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    command = [sys.executable, "-m", "loadgen.sim", *args, "--host", LOOPBACK, "--port", str(port)]
    with running(command, url + "/health", log, timeout_s=timeout_s):
        yield url
