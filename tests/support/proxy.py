"""The proxy as a real process, its environment, and a client that hangs up mid-stream."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from loadgen.stack.processes import NotReady, free_port, stop, wait_ready
from tests.support import ROOT
from tests.support.otlp_receiver import OTLPReceiver


class ProxyProcess:
    """`python -m latency_proxy …` in a subprocess, its JSON logs captured to a file."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: Path,
        open_files: tuple[int, int] | None = None,  # RLIMIT_NOFILE (soft, hard) to start with
        address_space: tuple[int, int] | None = None,  # RLIMIT_AS (soft, hard), bytes
    ) -> None:
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
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=_limits(
                {resource.RLIMIT_NOFILE: open_files, resource.RLIMIT_AS: address_space}
            ),
        )

    def wait_ready(self, timeout: float = 20.0) -> ProxyProcess:
        try:
            wait_ready(self.admin + "/healthz", self.process, timeout)
        except NotReady as exc:
            raise RuntimeError(f"proxy not ready ({exc}): {self.output()}") from None
        return self

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

    def wait_logged(self, path: str, count: int, timeout: float = 10.0) -> None:
        """Until `count` requests to `path` are logged: a client can read a response's end
        before the proxy writes its line, and the proxy logs other calls (loadgen's
        /tokenize) beside the ones counted. AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log_lines()
            logged = sum(1 for x in lines if x.get("msg") == "request" and x.get("path") == path)
            if logged >= count:
                return
            assert time.monotonic() < deadline, f"the proxy logged {logged} of {count} {path}"
            time.sleep(0.1)

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

    def samples(self, metric: str) -> list[float]:
        """Each of a metric's series' values on the admin port's /metrics, in order."""
        return [
            float(line.rsplit(" ", 1)[1])
            for line in self.metrics().splitlines()
            if line.startswith((metric + "{", metric + " "))
        ]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        code = stop(self.process, timeout, sig)
        self._log.close()
        return code


def _limits(limits: dict[int, tuple[int, int] | None]) -> Callable[[], None] | None:
    """The resource limits the proxy starts with, those given."""
    given = {kind: limit for kind, limit in limits.items() if limit is not None}
    if not given:
        return None

    def apply() -> None:
        for kind, limit in given.items():
            resource.setrlimit(kind, limit)

    return apply


@contextmanager
def started_proxies(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ProxyProcess]]:
    """Starts proxy processes and kills each one when the scope that started it ends: a
    proxy left running keeps exporting telemetry to a receiver in the test process."""
    started: list[ProxyProcess] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        ready: bool = True,
        open_files: tuple[int, int] | None = None,
        address_space: tuple[int, int] | None = None,
    ) -> ProxyProcess:
        log_path = tmp_path_factory.mktemp("proxy") / "proxy.log"
        env = env if env is not None else proxy_env(None)
        proxy = ProxyProcess(list(args), env, log_path, open_files, address_space)
        started.append(proxy)
        return proxy.wait_ready() if ready else proxy

    try:
        yield start
    finally:
        for proxy in started:
            proxy.stop(signal.SIGKILL)


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


def read_raw(response: httpx.Response) -> tuple[bytes, bool]:
    """A streamed response's raw bytes, and whether its connection closed before the body's
    end (the proxy cuts a client's body so when its upstream's broke)."""
    raw = b""
    try:
        for chunk in response.iter_raw():
            raw += chunk
    except httpx.RemoteProtocolError as exc:
        if "incomplete" not in str(exc):
            raise
        return raw, True
    return raw, False
