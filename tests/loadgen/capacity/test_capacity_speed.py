"""`capacity --by speed`: how much faster than recorded a trace can be replayed before an SLO
breaks, bracketed against the simulator's known knee (tests/loadgen/capacity/test_capacity.py:
`llama-70b-awq-tp4-a100` with 128-token prompts and 8-token answers meets TTFT ≤ 300 ms and
TPOT ≤ 50 ms at P90 at 10 req/s and fails at 24)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.cli import main
from loadgen.stack.processes import simulator

SLO = ["--slo", "ttft=300ms@p90", "--slo", "tpot=50ms@p90"]
RATE = 5.0  # the trace's own requests/s: the knee is between speed 2 and 4.8


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--preset", "llama-70b-awq-tp4-a100") as url:
        yield url


@pytest.mark.slow
def test_capacity_by_speed_brackets_the_knee(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "steady.jsonl"
    rows = [
        {"timestamp": i * 1000 / RATE, "input_length": 128, "output_length": 8} for i in range(60)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["capacity", "--target", sim, "--replay", str(trace), "--by", "speed", "--start", "2"]
    argv += ["--budget", "40s", "--warmup", "0.5s", "--no-progress", *SLO]
    assert main([*argv, "--out", str(tmp_path / "cap")]) == 0
    result = json.loads((tmp_path / "cap" / "capacity.json").read_text())
    (t,) = result["targets"].values()
    low, high = t["bracket"]
    assert low is not None and high is not None
    assert 2 <= low < 24 / RATE and 10 / RATE < high <= 8  # where the rate search found it
    for probe in t["probes"]:
        run = json.loads((tmp_path / "cap" / probe["run_dir"] / "run.json").read_text())
        assert run["meta"]["replay"]["speed"] == probe["level"]
        assert run["meta"]["replay"]["window"]["records"] == 60  # the same window each time
    report = (tmp_path / "cap" / "report.md").read_text()
    name = next(iter(result["targets"]))
    assert f"this traffic can grow {low:g}x on {name} before " in report  # what broke first
    if t["binding_slo"] is not None:
        assert t["binding_slo"]["level"] == high and t["binding_slo"]["value_s"] > 0


def test_by_speed_needs_a_replay_and_a_replay_needs_by_speed(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["capacity", "--by", "speed"])
    with pytest.raises(SystemExit):
        main(["capacity", "--replay", "x.jsonl"])
    assert "--by speed searches a --replay's speed" in capsys.readouterr().err
