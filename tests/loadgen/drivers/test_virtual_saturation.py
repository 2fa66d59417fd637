"""A virtual: level that saturates is judged as a served one would be: the twin's engines'
waiting queue and preemptions around the window are the gauges a live run scrapes from
vLLM, so steady.py reads the same figures, and the throughput is what completed."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.commands.cli import main

DATA = Path(__file__).parents[3] / "docs" / "sim" / "opt-13b-a100"


def _run(out: Path, target: str, *flags: str) -> dict:
    argv = ["--target", target, "--out", str(out), "--no-progress", *flags]
    assert main(argv) == 0
    (t,) = json.loads((out / "summary.json").read_text())["targets"].values()
    return t


def test_a_virtual_replay_past_the_engines_pace_is_saturated(tmp_path: Path) -> None:
    # real vLLM served this trace (4 req/s) at 2.5 req/s; twice as fast (8 req/s) is
    # far past the base preset's pace too
    target = f"virtual:{DATA / 'opt-13b-fp16-a100.toml'}"
    flags = ("--replay", str(DATA / "rate-4.log"), "--replay-speed", "2")
    t = _run(tmp_path / "r", target, *flags)
    state = t["steady_state"]
    assert state["steady"] is False
    assert any("waiting queue grew" in reason for reason in state["reasons"])
    assert state["server"]["waiting"]["end"] > 20
    assert t["throughput"]["requests_per_s"] == state["completion_per_s"]
    assert t["throughput"]["requests_per_s"] < 0.8 * state["arrival_per_s"]


def test_a_virtual_replay_the_engine_keeps_up_with_is_steady(tmp_path: Path) -> None:
    target = f"virtual:{DATA / 'opt-13b-fp16-a100.toml'}"
    t = _run(tmp_path / "r", target, "--replay", str(DATA / "rate-1.log"))
    assert t["steady_state"]["steady"] is True, t["steady_state"]["reasons"]
    assert t["steady_state"]["server"]["waiting"]["end"] < 5


def test_closed_loop_past_the_engines_seats_waits_in_its_queue(tmp_path: Path) -> None:
    flags = ("--concurrency", "32", "--requests", "200", "--warmup", "5s")
    t = _run(
        tmp_path / "c", "virtual:llama-70b-bf16-tp4-a100", *flags,
        "--virtual-args", "--max-num-seqs 4",
    )  # fmt: skip
    state = t["steady_state"]
    assert state["steady"] is False
    assert "more streams than it runs at once" in "; ".join(state["reasons"])


def test_a_sweep_that_crosses_the_knee_says_where(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s"
    flags = ("--rate", "2,30", "--duration", "20s", "--warmup", "0s", "--no-progress")
    assert main(["--target", "virtual:llama-70b-bf16-tp4-a100", "--out", str(out), *flags]) == 0
    summary = json.loads((out / "summary.json").read_text())
    steadies = [
        p["targets"]["virtual:llama-70b-bf16-tp4-a100"]["steady_state"]["steady"]
        for p in summary["sweep"]["points"]
    ]
    assert steadies == [True, False]
    said = "virtual:llama-70b-bf16-tp4-a100 saturates between 2 and 30 req/s (predicted)."
    assert said in capsys.readouterr().out
    assert said in (out / "report.md").read_text()
