"""`pip install latency-proxy` is the proxy alone: a fresh venv with the core's requirements
and nothing else starts the proxy and the simulator, with no numpy, matplotlib, aiohttp,
gRPC or Locust. The wheel has the hot path compiled where a C compiler is, and is pure
Python where none is (or LATENCY_PROXY_PURE=1), and either way the proxy starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.support import ROOT

# a wheel is built with the hot path compiled (about a minute of one core) or pure
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ABSENT = ("numpy", "matplotlib", "aiohttp", "locust", "gevent", "grpc", "tokenizers")


def venv_with_wheel(where: Path, **build_env: str) -> Path:
    """A venv's python: the core's requirements, then the project's wheel, built with
    `build_env`, without deps."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, *PROJECT["dependencies"]], check=True, timeout=600, env=clean_env())
    wheels = where / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "--wheel-dir", str(wheels), str(ROOT)],
        check=True, timeout=600, env=clean_env(**build_env),  # compiling: ~70 s of one core
    )  # fmt: skip
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, env=clean_env())
    return python


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return venv_with_wheel(tmp_path_factory.mktemp("core"))


def hot_path(python: Path) -> str:
    done = subprocess.run(
        [str(python.parent / "latency-proxy"), "--version"],
        capture_output=True, text=True, env=clean_env(), cwd="/", check=True,
    )  # fmt: skip
    return done.stdout.strip().rpartition(" ")[2]


def test_the_wheel_is_compiled_where_a_compiler_is(core: Path) -> None:
    assert hot_path(core) == "(compiled)"
    pure = subprocess.run(
        [str(core.parent / "latency-proxy"), "--version"],
        capture_output=True, text=True, env=clean_env(LATENCY_PROXY_PURE="1"), cwd="/",
    )  # fmt: skip
    assert pure.stdout.strip().endswith("(pure)"), pure.stdout


@pytest.mark.parametrize(
    "build_env", [{"CC": "/nonexistent/cc"}, {"LATENCY_PROXY_PURE": "1"}], ids=["no-cc", "pure"]
)
def test_without_a_compiler_the_wheel_is_pure(
    build_env: dict[str, str], tmp_path: Path
) -> None:
    python = venv_with_wheel(tmp_path, **build_env)
    assert hot_path(python) == "(pure)"  # --version imports the whole proxy
    (packages,) = (python.parent.parent / "lib").glob("python3*/site-packages")
    assert not list((packages / "latency_proxy").rglob("*.so"))


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH: the venv must import its own installed copy, not this tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("OTEL_")}
    return {**env, **extra}


def wait_ok(url: str, process: subprocess.Popen, timeout_s: float = 60) -> int:
    """The status of the first answer from `url`, polling while the server starts."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status
        except OSError:
            assert process.poll() is None, "the server exited"
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(0.2)


def test_core_installs_none_of_the_extras(core: Path) -> None:
    for name in ABSENT:
        done = subprocess.run(
            [str(core), "-c", f"import {name}"], capture_output=True, env=clean_env(), cwd="/"
        )
        assert done.returncode != 0, f"{name} is importable in the core venv"
    done = subprocess.run(
        [str(core), "-c", "import latency_proxy; print(latency_proxy.__file__)"],
        capture_output=True, text=True, env=clean_env(), cwd="/", check=True,
    )  # fmt: skip
    assert str(core.parent.parent) in done.stdout  # the installed copy, not the tree


def test_core_proxy_starts_and_answers_healthz(core: Path) -> None:
    proxy = subprocess.Popen(
        [str(core.parent / "latency-proxy"), "--upstream", "http://127.0.0.1:9",
         "--port", "0", "--admin-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd="/",
    )  # fmt: skip
    try:
        assert proxy.stdout is not None
        listening = json.loads(proxy.stdout.readline())
        assert listening["msg"] == "listening", listening
        assert wait_ok(f"http://{listening['admin']}/healthz", proxy) == 200
        maps = Path(f"/proc/{proxy.pid}/maps").read_text()
        assert "numpy" not in maps and "matplotlib" not in maps
    finally:
        proxy.terminate()
        proxy.communicate(timeout=30)


def test_core_runs_the_simulator(core: Path) -> None:
    with socket.socket() as probe:  # the simulator does not say which port 0 became
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sim = subprocess.Popen(
        [str(core), "-m", "loadgen.sim", "--ttft", "10ms", "--itl", "10ms", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env(), cwd="/",
    )  # fmt: skip
    try:
        assert wait_ok(f"http://127.0.0.1:{port}/health", sim) == 200
    finally:
        sim.terminate()
        sim.communicate(timeout=30)


def test_grpc_export_without_the_extra_names_it(core: Path) -> None:
    env = clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )
    done = subprocess.run(
        [str(core.parent / "latency-proxy"), "--upstream", "http://127.0.0.1:9", "--port", "0"],
        capture_output=True, text=True, env=env, cwd="/", timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "latency-proxy[grpc]" in done.stderr and "Traceback" not in done.stderr


def test_loadgen_without_its_extra_names_it(core: Path) -> None:
    done = subprocess.run(
        [str(core), "-m", "loadgen", "--help"],
        capture_output=True, text=True, env=clean_env(), cwd="/", timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "latency-proxy[loadgen]" in done.stderr and "Traceback" not in done.stderr
