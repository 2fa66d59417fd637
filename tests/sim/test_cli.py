"""`python -m loadgen.sim` as users and other tests start it: a real process on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from loadgen.sim.model import presets
from loadgen.stack.processes import free_port
from tests.support import ROOT, run_module


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("loadgen.sim", *args, timeout=30)


@contextmanager
def running(*args: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "loadgen.sim", "--port", str(port), *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no /health within 20 s"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_list_presets_prints_one_name_per_line() -> None:
    result = sim("--list-presets")
    assert result.returncode == 0
    assert result.stdout.split() == presets.names()
    assert "llama-70b-awq-tp4-a100" in result.stdout.splitlines()
    assert "qwen-72b-gptq-tp4-a100" in result.stdout.splitlines()


def test_bad_command_lines_fail_with_a_message() -> None:
    unknown = sim("--preset", "no-such-model")
    assert unknown.returncode == 2 and "unknown preset" in unknown.stderr
    half = sim("--ttft", "300ms")
    assert half.returncode == 2 and "--itl" in half.stderr
    bad_duration = sim("--ttft", "soon", "--itl", "20ms")
    assert bad_duration.returncode == 2


def test_fixed_mode_serves_under_the_given_name() -> None:
    with running("--ttft", "50ms", "--itl", "5ms", "--served-model-name", "llama-70b") as url:
        models = httpx.get(url + "/v1/models").json()
        t0 = time.monotonic()
        reply = httpx.post(
            url + "/v1/chat/completions",
            timeout=10,
            json={
                "model": "llama-70b",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ).json()
        elapsed = time.monotonic() - t0
    assert [m["id"] for m in models["data"]] == ["llama-70b"]
    assert reply["usage"]["completion_tokens"] == 10
    assert 0.05 + 9 * 0.005 <= elapsed < 0.5


def test_a_copied_preset_file_runs(tmp_path: Path) -> None:
    text = (presets._directory() / "qwen-72b-gptq-tp4-a100.toml").read_text()
    edited = tmp_path / "my-qwen.toml"
    edited.write_text(
        text.replace('served_model_name = "qwen-72b"', 'served_model_name = "my-qwen"')
    )
    with running("--preset-file", str(edited)) as url:
        models = httpx.get(url + "/v1/models").json()
        metrics = httpx.get(url + "/metrics").text
    assert models["data"][0]["id"] == "my-qwen" and models["data"][0]["max_model_len"] == 8192
    assert metrics.count("DCGM_FI_DEV_POWER_USAGE{") == 4  # one series per GPU of TP=4
    assert 'vllm:num_requests_waiting{engine="0",model_name="my-qwen"} 0.0' in metrics
