"""`python -m loadgen plan --ray`: the candidates sized as Ray tasks, in scratch directories
on the workers, read the same as those sized by this machine's processes: the same figures
and reasons in plan.json, and each candidate's files where a local search writes them. The
plans run as their own processes: Ray, once imported, changes the process's logging."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loadgen.plan.test_plan_search import SLO, write_trace
from tests.support import ROOT, run_module

SPACE = (
    'presets = ["llama-70b-awq-tp4-a100", "llama-2-7b-bf16-h200"]\n'
    "[prices]\na100 = 1.8\nh200 = 3.5\n"
)


def planned(tmp_path: Path, name: str, *flags: str) -> tuple[dict, Path]:
    trace = write_trace(tmp_path / "trace.jsonl", 40, rate=2.0)
    space = tmp_path / "plan.toml"
    space.write_text(SPACE)
    out = tmp_path / name
    argv = ["plan", "--replay", str(trace), "--candidates", str(space), *SLO, "--seed", "3"]
    done = run_module("loadgen", *argv, "--jobs", "2", "--out", str(out), *flags, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "plan.json").read_text()), out


def sizing(entry: dict, out: Path) -> dict:
    """A candidate's figures and reasons, its paths read from the plan's folder."""
    text = json.dumps({k: entry.get(k) for k in ("status", "reason", "replicas", "searches")})
    return json.loads(text.replace(str(out), "OUT"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="the ray extra is not installed"
)
def test_candidates_sized_on_ray_read_as_those_sized_here(tmp_path: Path) -> None:
    here, here_out = planned(tmp_path, "here")
    on_ray, ray_out = planned(tmp_path, "ray", "--ray", "local")
    assert [e["name"] for e in on_ray["candidates"]] == [e["name"] for e in here["candidates"]]
    for mine, theirs in zip(here["candidates"], on_ray["candidates"], strict=True):
        assert sizing(theirs, ray_out) == sizing(mine, here_out)
        for search in theirs.get("searches") or []:
            assert (Path(search["dir"]) / "capacity.json").is_file()  # written back here
            assert search["dir"].startswith(str(ray_out))
    assert on_ray["ranking"] == here["ranking"]


def test_without_ray_installed_the_flag_says_how_to_get_it(tmp_path: Path) -> None:
    code = "import sys; sys.modules['ray'] = None\nfrom loadgen.commands.cli import main\n"
    code += "sys.exit(main(sys.argv[1:]))"
    trace = write_trace(tmp_path / "trace.jsonl", 40, rate=2.0)
    argv = [
        "plan",
        "--replay",
        str(trace),
        *SLO,
        "--gpu-types",
        "a100",
        "--gpu-prices",
        "a100=1.8",
        "--ray",
        "local",
    ]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv, "--out", str(tmp_path / "p")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "loadgen plan: --ray needs Ray: pip install 'latency-proxy[ray]'"
    )
