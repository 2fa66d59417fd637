"""`capacity --target virtual:…`: the search runs its probes on the simulator's virtual clock
and finds the knee the twin itself shows (the highest load whose percentiles stay under the
SLOs when the twin is run directly, long); its outputs are marked predicted; a combination it
cannot run is one line, exit 2, before any probe and with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.commands.cli import main
from loadgen.reports.run import UNDRAWN
from loadgen.sim import twin
from loadgen.sim.model import presets

PRESET = "llama-70b-awq-tp4-a100"
TARGET = f"virtual:{PRESET}"
SLO = ["--slo", "ttft=300ms@p90", "--slo", "tpot=50ms@p90"]
TOKENS = ["--input-tokens", "128", "--output-tokens", "8"]
RATE = 5.0  # the trace's own requests/s


def meets(arrivals: list[float]) -> bool:
    """The twin, run directly on these arrivals of 128/8-token requests, meets both SLOs at
    P90 (its first fifth, the filling, left out)."""
    timings = twin.run(presets.load(PRESET), [twin.Request(a, 128, 8) for a in arrivals]).timings
    kept = timings[len(timings) // 5 :]
    ttft = np.percentile([t.ttft for t in kept], 90)
    tpot = np.percentile([t.tpot for t in kept], 90)
    return bool(ttft <= 0.3 and tpot <= 0.05)


def knee(levels: np.ndarray, arrivals) -> float:
    """The highest level that meets below the lowest that does not."""
    met = [meets(arrivals(level)) for level in levels]
    first_miss = met.index(False)
    return float(levels[first_miss - 1])


def search(tmp_path: Path, *flags: str) -> tuple[dict, str]:
    out = tmp_path / "cap"
    argv = ["capacity", "--target", TARGET, "--no-progress", *SLO, "--out", str(out), *flags]
    assert main(argv) == 0
    (t,) = json.loads((out / "capacity.json").read_text())["targets"].values()
    return t, (out / "report.md").read_text()


@pytest.mark.slow
def test_by_rate_it_finds_the_twins_knee(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)

    def poisson(rate: float) -> list[float]:
        return list(np.cumsum(rng.exponential(1 / rate, 3000)))

    truth = knee(np.arange(8.0, 40.0, 1.0), poisson)
    t, report = search(tmp_path, "--by", "rate", "--start", "8", *TOKENS)
    low, high = t["bracket"]
    assert 0.85 * truth <= low <= 1.1 * truth and high > low
    assert t["predicted"]["bundled"] is True
    assert "(predicted from a bundled preset; not fitted to your server)" in report
    assert "**Predicted**" in report


@pytest.mark.slow
def test_by_speed_it_finds_the_twins_knee(tmp_path: Path) -> None:
    offsets = np.arange(200) / RATE
    trace = tmp_path / "steady.jsonl"
    rows = [{"timestamp": a * 1000, "input_length": 128, "output_length": 8} for a in offsets]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth = knee(np.arange(1.0, 10.0, 0.1), lambda speed: list(offsets / speed))
    t, report = search(tmp_path, "--by", "speed", "--replay", str(trace), "--start", "2")
    low, high = t["bracket"]
    assert 0.85 * truth <= low <= 1.1 * truth and high > low
    assert f"this traffic can grow {low:g}x on one replica of {TARGET}" in report


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--target", "http://127.0.0.1:9"], "virtual: targets are searched alone"),
        (["--embedded"], "--embedded starts servers"),
        (["--virtual-args", "--max-num-seqz 3"], "--max-num-seqz"),
        (["--blocks", "2"], "does not take --blocks"),
        (["--slo", "ttft=0s@p90"], "'ttft=0s@p90': an SLO's limit must be above 0"),
    ],
)
def test_a_combination_it_cannot_run_is_one_line(tmp_path: Path, capsys, flags, words) -> None:
    out = tmp_path / "cap"
    argv = ["capacity", "--target", TARGET, *flags, *SLO, "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not out.exists()


def test_an_unknown_preset_is_one_line(tmp_path: Path, capsys) -> None:
    argv = ["capacity", "--target", "virtual:nope", *SLO, "--out", str(tmp_path / "cap")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "virtual:nope" in err and "unknown preset" in err


def test_probes_without_pngs_lose_nothing_but_the_pngs(tmp_path: Path) -> None:
    """--no-probe-pngs: the same probes and figures, each probe's report.html still charted,
    its report.md saying where the charts are; `report DIR` draws the PNGs later."""
    check = ["--by", "rate", "--start", "8", "--floor", "8", "--ceiling", "8", *TOKENS]
    check += ["--requests", "200", "--seed", "5"]
    drawn, _ = search(tmp_path / "drawn", *check)
    bare, _ = search(tmp_path / "bare", *check, "--no-probe-pngs")
    assert json.dumps(bare["probes"]) == json.dumps(drawn["probes"])
    probes = sorted((tmp_path / "bare" / "cap").glob("probe-*"))
    assert probes and (tmp_path / "bare" / "cap" / "capacity.png").exists()
    for probe in probes:
        assert not list(probe.glob("*.png"))
        assert UNDRAWN in (probe / "report.md").read_text()
        assert "<svg" in (probe / "report.html").read_text()
    drawn_pngs = {p.name for p in (tmp_path / "drawn" / "cap").glob("probe-*/*.png")}
    assert drawn_pngs
    assert main(["report", str(tmp_path / "bare" / "cap")]) == 0
    for probe in probes:
        pngs = {p.name for p in probe.glob("*.png")}
        assert pngs and all(
            f"![{name}]({name})" in (probe / "report.md").read_text() for name in pngs
        )
        assert UNDRAWN not in (probe / "report.md").read_text()
