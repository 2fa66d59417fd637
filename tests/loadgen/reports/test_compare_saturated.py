"""Two runs that both fell behind their load compare by what they sustained: the comparison
leads with the saturation and each run's completed rate, offers no latency percentile
(they grow with the run's length) as a difference, and gives one throughput per run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.stack.processes import simulator

LOAD = ["--duration", "8s", "--warmup", "0s", "--drain", "2s", "--input-tokens", "64"]
LOAD += ["--output-tokens", "64", "--ignore-eos", "--no-progress"]


@pytest.fixture(scope="module")
def one_at_a_time() -> Iterator[str]:
    """The simulator running one sequence at a time: 64-token answers, about 1 req/s."""
    with simulator("--preset", "llama-70b-awq-tp4-a100", "--max-num-seqs", "1") as url:
        yield url


def saturated_run(url: str, out: Path, rate: str) -> dict:
    assert main(["--target", url, "--rate", rate, *LOAD, "--out", str(out)]) == 0
    (t,) = rundir.read_summary(out)["targets"].values()
    assert t["steady_state"]["steady"] is False  # the premise: it fell behind
    return t


def test_saturated_runs_compare_by_what_they_sustained(
    one_at_a_time: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = saturated_run(one_at_a_time, tmp_path / "a", "4")
    b = saturated_run(one_at_a_time, tmp_path / "b", "6")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    lead = text[: text.index("| metric |")]
    for t in (a, b):
        completed = f"completed {t['steady_state']['completion_per_s']:.1f} req/s"
        assert completed in lead, lead
    assert "saturated" in lead and "capacity" in lead
    assert not re.search(r"(TTFT|TPOT|ITL|E2E) P\d+ is [\d.]+% (higher|lower)", text), text
    assert "latency percentiles are not compared" in text
    for t in (a, b):  # summary.json's throughput is the sustained rate, the same figure
        assert t["throughput"]["requests_per_s"] == t["steady_state"]["completion_per_s"]
    assert text.count("req/s") >= 2


def test_a_saturated_runs_console_table_shows_the_rate_it_completed(
    one_at_a_time: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = saturated_run(one_at_a_time, tmp_path / "a", "4")
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("127.0.0.1:"))
    assert f"{t['steady_state']['completion_per_s']:.2f}" in row.split()
