"""Helpers the tests share: processes, receivers, upstreams, tolerances (fixtures: conftest.py)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a real embedded run in today's on-disk format: what the reports' tests read and rebuild
RUN_V1 = ROOT / "tests" / "loadgen" / "fixtures" / "run-v1"


def run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m module args` from the repository's root, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
