"""`capacity --by speed`: how much faster than recorded a trace can be replayed before an SLO
breaks, bracketed against the simulator's known knee (tests/loadgen/capacity/test_capacity.py:
`llama-70b-awq-tp4-a100` with 128-token prompts and 8-token answers meets TTFT ≤ 300 ms and
TPOT ≤ 50 ms at P90 at 10 req/s and fails at 24)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.capacity.axis import AXES
from loadgen.capacity.search import Search
from loadgen.capacity.verdict import MEETS, UNDECIDED
from loadgen.commands.capacity import CapacityConfig, _Prober
from loadgen.commands.cli import build_parser, config_from, main
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


def _trace(path: Path, offsets_s: list[float]) -> Path:
    rows = [{"timestamp": t * 1000, "input_length": 128, "output_length": 8} for t in offsets_s]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_window_too_small_for_the_percentiles_is_refused_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl", [float(i) for i in range(100)])  # one a second
    out = tmp_path / "cap"
    argv = ["capacity", "--target", "http://127.0.0.1:9", "--replay", str(trace), "--by", "speed"]
    argv += ["--duration", "20s", *SLO, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    # P90 needs 36 requests to be bounded both ways; the 36th record is at 35 s
    assert "the window holds 20 measured requests" in err
    assert "needs at least 36" in err and "--duration 36s would give them" in err
    assert not out.exists()  # refused before any probe: nothing written
    argv[argv.index("20s")] = "200s"
    short = _trace(tmp_path / "short.jsonl", [float(i) for i in range(30)])
    argv[argv.index(str(trace))] = str(short)
    assert main(argv) == 2
    assert "more than the trace holds" in capsys.readouterr().err


def test_an_extension_widens_a_replays_window(tmp_path: Path) -> None:
    """An undecided probe is run again over twice the trace window, not the same records for
    longer; a window that already holds the whole trace is not extended at all."""
    trace = _trace(tmp_path / "t.jsonl", [i * 0.5 for i in range(200)])  # 2 a second
    argv = ["capacity", "--replay", str(trace), "--by", "speed", "--duration", "30s", *SLO]
    parser = build_parser(search=True)
    config = config_from(parser.parse_args(argv[1:]), argv)
    search = CapacityConfig(by="speed", start=1.0, budget_s=60, probe_requests=None,
                            min_probe_s=30.0)  # fmt: skip
    prober = _Prober(config, search, AXES["speed"], 60, {})
    assert [prober._size(e) for e in (0, 1, 2)] == [60, 120, 200]  # 200: the whole trace
    assert prober._grows(1) and prober._grows(2)
    whole = _Prober(replace(config, duration_s=None), search, AXES["speed"], 200, {})
    assert not whole._grows(1)


class _ScriptedProber(_Prober):
    """A prober whose probes are verdicts given in advance, not runs: it keeps which level
    and which window (extension) each probe was asked for."""

    asked: list[tuple[float, int]]
    outcomes: Iterator[str]

    def probe(self, spec: str, level: float, extension: int, **_: object) -> dict:
        self.asked.append((level, extension))
        said = {"ratios": {}, "failures": [], "unsure": ["TTFT P90"], "warmup_s": 0}
        return said | {"outcome": next(self.outcomes, MEETS), "number": len(self.asked),
                       "window_s": 40.0 * 2**extension, "requests": 80 * 2**extension}


def test_once_a_window_is_widened_every_later_level_is_judged_on_it(tmp_path: Path) -> None:
    """1x undecided on 40 s of trace and decided on 80 s: 0.5x (and any later level) replays
    the 80 s too, not 40 s again."""
    trace = _trace(tmp_path / "t.jsonl", [i * 0.5 for i in range(400)])
    argv = ["capacity", "--replay", str(trace), "--by", "speed", "--duration", "40s", *SLO]
    config = config_from(build_parser(search=True).parse_args(argv[1:]), argv)
    search = CapacityConfig(by="speed", start=1.0, budget_s=600, probe_requests=None,
                            min_probe_s=40.0)  # fmt: skip
    prober = _ScriptedProber(config, search, AXES["speed"], 80, {"t": "t"})
    prober.asked, prober.outcomes = [], iter([UNDECIDED, MEETS])
    levels = Search(AXES["speed"], 1.0)
    prober.judge("t", 1.0, levels)
    prober.judge("t", 0.5, levels)
    assert prober.asked == [(1.0, 0), (1.0, 1), (0.5, 1)]
