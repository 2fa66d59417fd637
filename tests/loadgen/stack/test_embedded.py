"""The embedded default: simulator + proxy started, measured, reported, and always stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import ROOT

SHORT = ["--duration", "2s", "--warmup", "0.5s", "--input-tokens", "64", "--output-tokens", "8"]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def loadgen(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_embedded_run_measures_proxy_and_direct(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = loadgen("--target", "proxy", "--embedded", "--out", str(out), *SHORT)
    try:
        stdout, stderr = process.communicate(timeout=90)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["targets"]) == ["direct", "proxy"]  # the baseline first
    for target in summary["targets"].values():
        assert target["requests"]["ok"] > 0 and target["requests"]["failed"] == 0
        assert target["metrics"]["ttft_s"]["p50"] > 0
        assert target["gpu"]["peak_memory_mib"] > 0  # the simulator's DCGM-style gauges
    meta = json.loads((out / "run.json").read_text())["meta"]
    assert meta["targets"]["proxy"]["model"] == "llama-70b"
    assert (out / "report.md").exists() and "proxy" in stdout
    # the run's question answered first: what the proxy adds, within the margin or not
    cost = summary["proxy_cost"]
    low, high = cost["interval_s"]
    assert low <= cost["added_s"] <= high and cost["metric"] == "ttft_s"
    assert stdout.startswith("the proxy adds "), stdout
    assert "to TTFT P50 (95% CI " in stdout.splitlines()[0]
    report = (out / "report.md").read_text()
    assert report.index("**The proxy adds ") < report.index("## direct")
    assert "answer TTFT" not in report  # nothing reasoned: the column would repeat TTFT


def test_ctrl_c_stops_everything_it_started(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = loadgen("--embedded", "--duration", "60s", "--out", str(out), "--no-progress")
    started: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(started) < 2:
            time.sleep(0.2)
            started = children_of(process.pid)
        assert len(started) == 2, "simulator and proxy should be running"
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        assert process.returncode == 130
        assert not [pid for pid in started if alive(pid)]
    finally:
        process.kill()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
