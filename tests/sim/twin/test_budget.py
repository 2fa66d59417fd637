"""Replica counts are priced in memory before any work: a thousand replicas of a large
preset are refused in one line, exit 2, where they used to end in MemoryError."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.twin import budget
from tests.sim.twin.test_fit import capture

LARGE = "llama-70b-awq-tp4-a100"  # 51,441 KV blocks a replica
LIMIT = 4 << 30  # the address space the tester's MemoryError came at


def test_the_estimate_refuses_what_does_not_fit_and_says_how_many_would() -> None:
    preset = presets.load(LARGE)
    assert budget.replicas_fault("--replicas", preset, 4, available=4 << 30) is None
    said = budget.replicas_fault("--replicas", preset, 1000, available=4 << 30)
    assert said is not None and said.startswith("--replicas 1000: 1000 replicas of")
    most = int(said.rsplit(" ", 1)[1])
    assert budget.replicas_bytes(preset, most) <= 2 << 30 < budget.replicas_bytes(preset, most + 1)
    assert budget.replicas_fault("--replicas", preset, 1000, available=None) is None


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120,
        preexec_fn=_limited,
    )


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-m", "loadgen.sim", "fit", "{log}", "--preset", LARGE, "--replicas", "1000"],
         "--replicas 1000"),
        (["-m", "loadgen", "--target", f"virtual:{LARGE}", "--virtual-replicas", "1000",
          "--rate", "1", "--duration", "5s", "--no-progress"], "--virtual-replicas 1000"),
    ],
)
def test_a_thousand_replicas_are_refused_in_one_line(
    tmp_path: Path, argv: list[str], flag: str
) -> None:
    requests = [twin.Request(float(i), 100, 10) for i in range(60)]
    log = capture(tmp_path / "proxy.log", presets.load(LARGE), requests)
    done = _run(*(a.format(log=log) for a in argv), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert flag in line and "of memory to simulate" in line
    assert sorted(tmp_path.iterdir()) == [log]
