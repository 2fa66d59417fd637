"""Shared fixtures: a scripted upstream (loadgen.sim), a real OTLP receiver, proxies as real
processes."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from otlp_receiver import OTLPReceiver
from scripted_upstream import Upstream, serve

ROOT = Path(__file__).resolve().parent.parent

# Measurement-correctness tolerances. A figure may not come out earlier than what the scripted
# side waited (beyond timer granularity), but a noisy 2-core box delivers late: stalls of
# ~0.1 s were seen in CI. Tight below, wide above.
EARLY = 0.005
LATE = 0.15


def on_time(measured: float, scripted: float) -> bool:
    return scripted - EARLY <= measured <= scripted + LATE


@pytest.fixture(autouse=True)
def quiet_heap() -> None:
    """Keep full garbage collections short while a test runs.

    Scripted upstreams, simulators and loadgen runs share this process; a full collection of
    the heap the whole suite has built (~300k objects, ~0.3 s) would show up as their latency.
    """
    gc.collect()
    gc.freeze()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ProxyProcess:
    """`python -m latency_proxy …` in a subprocess, its JSON logs captured to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.admin_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [
            sys.executable,
            "-m",
            "latency_proxy",
            "--port",
            str(self.port),
            "--admin-port",
            str(self.admin_port),
            *args,
        ]
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )

    def wait_ready(self, timeout: float = 20.0) -> ProxyProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"proxy exited {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(self.admin + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"proxy not ready: {self.output()}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict]:
        """The complete JSON lines so far: a reader can see a write() half done."""
        text = self.output()
        lines = []
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line.startswith("{"):
                lines.append(orjson.loads(line))
        return lines

    def request_logs(self, request_id: str, timeout: float = 5.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            found = [
                line
                for line in self.log_lines()
                if line.get("request_id") == request_id and line.get("msg") == "request"
            ]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def metrics(self, openmetrics: bool = False) -> str:
        headers = {"Accept": "application/openmetrics-text"} if openmetrics else {}
        return httpx.get(self.admin + "/metrics", headers=headers, timeout=5).text

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def disconnect_mid_stream(
    url: str, body: bytes, headers: dict[str, str], marker: bytes, count: int = 2
) -> float:
    """POST a streaming request over a raw socket, read until `marker` came `count` times,
    then close the connection; returns the perf_counter time of the close."""
    port = int(url.rsplit(":", 1)[1])
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n{head}"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while received.count(marker) < count:
            received += sock.recv(65536)
    return time.perf_counter()


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    with serve() as app:
        yield app


@pytest.fixture(scope="session")
def otlp() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as receiver:
        yield receiver


def proxy_env(otlp: OTLPReceiver | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LATENCY_PROXY_"))}
    env.update(
        OTEL_SERVICE_NAME="latency-proxy-test",
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_METRIC_EXPORT_INTERVAL="300",
        OTEL_EXPORTER_OTLP_TIMEOUT="2",
    )
    if otlp is not None:
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"
        )
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def start_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    started: list[ProxyProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, ready: bool = True) -> ProxyProcess:
        log_path = tmp_path_factory.mktemp("proxy") / "proxy.log"
        proxy = ProxyProcess(list(args), env if env is not None else proxy_env(None), log_path)
        started.append(proxy)
        return proxy.wait_ready() if ready else proxy

    yield start
    for proxy in started:
        proxy.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def proxy(start_proxy, upstream: Upstream, otlp: OTLPReceiver) -> ProxyProcess:
    """The shared proxy: default route to the scripted upstream, OTLP to the receiver."""
    return start_proxy("--upstream", upstream.url, env=proxy_env(otlp))
