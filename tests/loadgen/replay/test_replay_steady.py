"""A replay's saturation is judged by what the server does, on the simulator over loopback:
a trace whose prompts grow and whose arrivals bunch at its end is steady on a server far from
its limit, and a trace the server cannot keep up with is still saturated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.summary import summarize_run
from loadgen.commands.cli import main
from loadgen.runs.rundir import read
from loadgen.stack.processes import simulator

PRESET = "llama-2-7b-bf16-h200"  # prefill grows with the prompt, far from its limit here


def _trace(path: Path, offsets_s: np.ndarray, prompts: np.ndarray, output: int) -> Path:
    rows = [
        {"timestamp": float(t) * 1000, "input_length": int(n), "output_length": output}
        for t, n in zip(offsets_s, prompts, strict=True)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replay(url: str, trace: Path, out: Path, *flags: str) -> dict:
    argv = ["--target", url, "--replay", str(trace), "--no-progress", "--out", str(out)]
    assert main([*argv, *flags]) == 0
    (t,) = json.loads((out / "summary.json").read_text())["targets"].values()
    return t


@pytest.mark.slow
def test_growing_prompts_and_a_bunched_end_on_an_idle_server_are_steady(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    offsets = np.sort(np.concatenate([rng.uniform(0, 16, 40), rng.uniform(18, 20, 20)]))
    prompts = np.linspace(100, 3000, len(offsets))  # TTFT follows them up
    trace = _trace(tmp_path / "grow.jsonl", offsets, prompts, output=256)
    with simulator("--preset", PRESET) as url:
        t = _replay(url, trace, tmp_path / "run")
    state = t["steady_state"]
    assert state["steady"], state["reasons"]
    assert state["replay"] and state["unfinished"] == 0
    assert state["in_flight_end"] >= 10  # the bunched end: in flight at the close, yet steady
    # the same records judged as a rate run's are: by the TTFT trend and the in-flight tail
    data = read(tmp_path / "run")
    data.meta["sweep"] = "rate"
    as_rate = summarize_run(data)
    assert not next(iter(as_rate["targets"].values()))["steady_state"]["steady"]


@pytest.mark.slow
def test_a_replay_the_server_cannot_keep_up_with_is_saturated(tmp_path: Path) -> None:
    offsets = np.arange(60) / 6.0  # 6 req/s of 128-token answers on two sequences at a time
    trace = _trace(tmp_path / "flood.jsonl", offsets, np.full(60, 512), output=128)
    with simulator("--preset", PRESET, "--max-num-seqs", "2") as url:
        t = _replay(url, trace, tmp_path / "run", "--drain", "3s")
    state = t["steady_state"]
    assert not state["steady"]
    assert t["requests"]["unfinished"] >= 10
    assert state["reasons"][0].startswith(f"{t['requests']['unfinished']} of the window's 60")
