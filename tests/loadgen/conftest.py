"""Fixtures of the loadgen tests: the simulator as a real process on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from loadgen.stack.processes import free_port, running


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m loadgen.sim --preset llama-70b-awq-tp4-a100` on a free port: its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "loadgen.sim", "--preset", "llama-70b-awq-tp4-a100"]
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with running([*args, "--port", str(port)], url + "/health", log):
        yield url
