"""The reports' fixtures: a real run directory (tests/support's RUN_V1), copied for each test
that writes beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import RUN_V1


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(RUN_V1, out)
    return out
