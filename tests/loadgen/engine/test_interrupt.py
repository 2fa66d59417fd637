"""Ctrl-C or SIGTERM in the middle of a run: loadgen keeps what it measured and says so."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import uvloop

from loadgen.engine.runner import Runner
from loadgen.engine.schedule import Load, plan
from loadgen.engine.targets import Target
from loadgen.engine.workload import Lengths, Workload
from loadgen.runs import rundir
from tests.support import ROOT
from tests.support.scripted_upstream import arrivals, running


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(0.05, 0.02, {}) as url:
        yield url


def interrupt_mid_run(upstream: str, out: Path, signum: int, *extra: str) -> tuple[int, str, float]:
    """Start a one-minute run, signal it once load flows; returns (exit code, stderr, when)."""
    argv = [sys.executable, "-m", "loadgen", "--target", upstream, "--duration", "60s",
            "--concurrency", "4", "--output-tokens", "10", "--input-tokens", "16",
            "--warmup", "0.5s", "--no-progress", "--out", str(out), *extra]  # fmt: skip
    before = len(arrivals(upstream))
    process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(arrivals(upstream)) < before + 40:  # past the warmup, streams in flight
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.1)
    process.send_signal(signum)
    signalled = time.time()
    _, stderr = process.communicate(timeout=30)
    return process.returncode, stderr, signalled


def test_ctrl_c_writes_what_was_measured(upstream: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stderr, signalled = interrupt_mid_run(upstream, out, signal.SIGINT)
    assert code == 130, stderr
    assert "SIGINT: ending the run" in stderr
    summary = rundir.read_summary(out)
    assert summary["interrupted"] is True
    (target,) = summary["targets"].values()
    assert target["valid"] is False and "interrupted at" in target["invalid_reasons"][0]
    data = rundir.read(out)
    (phase,) = data.phases
    assert phase.interrupted and phase.end_at <= signalled + 1  # not the planned minute
    measured = [r for r in data.records if not r.excluded]
    assert measured and all(r.ok and r.e2e_s is not None for r in measured)
    assert target["requests"]["ok"] == len(measured)
    assert all(r.intended_at <= phase.end_at for r in measured)
    assert data.meta["interrupted_by"] == "SIGINT"
    assert "**Interrupted** by SIGINT" in (out / "report.md").read_text()


def test_sigterm_to_workers_merges_their_partial_shards(upstream: str, tmp_path: Path) -> None:
    out = tmp_path / "workers"
    code, stderr, _ = interrupt_mid_run(upstream, out, signal.SIGTERM, "--workers", "2")
    assert code == 130, stderr
    summary = rundir.read_summary(out)
    assert summary["interrupted"] is True
    data = rundir.read(out)
    assert {r.shard for r in data.records} == {0, 1}  # each worker wrote its part
    assert [p.interrupted for p in data.phases] == [True, True]
    for shard in (0, 1):
        assert rundir.read_summary(out / "shards" / f"shard-{shard}")["interrupted"] is True


def test_a_stop_between_blocks_still_marks_the_run_cut_short(upstream: str) -> None:
    rng = np.random.default_rng(0)
    workload = Workload("chat", Lengths(16, 16), Lengths(2, 2), rng)
    runner = Runner({"t": Target("t", upstream)}, {"t": "scripted"}, workload, rng, 30.0)
    blocks = plan(["t"], 2, 0.0, None, 4)

    async def go() -> None:
        await runner.run(blocks[:1], Load(concurrency=2))
        runner.stop()  # the first block is over: there is nothing to cut inside one
        await runner.run(blocks[1:], Load(concurrency=2))

    uvloop.run(go())
    (phase,) = runner.result.phases
    assert phase.interrupted
    assert len([r for r in runner.result.records if not r.excluded]) == 2  # block 0's share


@pytest.fixture(scope="module")
def silent_streams() -> Iterator[str]:
    """Answers /v1/models and /tokenize, but no stream's first token comes for an hour."""
    with running(3600, 0.02, {}) as url:
        yield url


@pytest.fixture(scope="module")
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers: loadgen waits in its start."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["start", "warmup", "measuring", "silent streams"])
def test_sigterm_ends_a_run_in_every_phase_within_seconds(
    phase: str, upstream: str, silent_streams: str, silent_server: str, tmp_path: Path
) -> None:
    target = {"start": silent_server, "silent streams": silent_streams}.get(phase, upstream)
    warmup = "30s" if phase == "warmup" else "0s"
    argv = [sys.executable, "-m", "loadgen", "--target", target, "--duration", "60s",
            "--concurrency", "4", "--output-tokens", "10", "--input-tokens", "16",
            "--warmup", warmup, "--no-progress", "--out", str(tmp_path / "run")]  # fmt: skip
    before = len(arrivals(target)) if phase != "start" else 0
    process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    if phase == "start":
        time.sleep(2)  # asking the silent server for its models
    else:
        wanted = before + (40 if phase == "measuring" else 4)
        while len(arrivals(target)) < wanted:
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.1)
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    _, stderr = process.communicate(timeout=30)
    took = time.monotonic() - signalled
    assert took < 5, (phase, took, stderr)
    assert process.returncode in (130, -signal.SIGTERM), stderr
    assert "Traceback" not in stderr
