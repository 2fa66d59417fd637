"""A fit's cost is bounded before it starts and shown while it runs: a capture that is no
file, too large or has a line no capture has is refused before parsing; a fit estimated
past --time-budget stops after one replay; a long one says how far it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loadgen.sim import fit_cost, twin
from loadgen.sim.model import presets
from tests.sim.twin.test_fit import BASE, capture, fit_cli


def refused(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    with pytest.raises(SystemExit) as exit_:
        fit_cli(*argv)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_what_is_no_capture_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ("--preset", BASE, "--out", tmp_path / "fitted.toml")
    assert "/dev/zero: not a regular file" in refused(capsys, "/dev/zero", *out)
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:  # sparse: no disk, no time
        f.truncate(fit_cost.MAX_CAPTURE_BYTES + 1)
    assert f"{huge}: the capture passes 128 MB" in refused(capsys, huge, *out)
    wide = tmp_path / "wide.log"
    wide.write_bytes(b'{"msg": "request"}\n' + b"x" * (100 << 10) + b"\n")
    assert f"{wide}:2: a line of 102,401 bytes" in refused(capsys, wide, *out)
    assert not (tmp_path / "fitted.toml").exists()


def test_a_fit_past_its_budget_stops_after_one_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = [twin.Request(0.0, 100, 10) for _ in range(3000)]  # all at once, as one
    log = capture(tmp_path / "same.log", presets.load(BASE), requests)
    out = tmp_path / "fitted.toml"
    said = refused(capsys, log, "--preset", BASE, "--out", out, "--time-budget", "1s")
    assert "the fit would take ~" in said and "one replay of its 3,000 requests took" in said
    assert "past --time-budget 1 s" in said
    assert not out.exists()
    assert "--time-budget 0s: give a duration above 0" in refused(
        capsys, log, "--preset", BASE, "--out", out, "--time-budget", "0s"
    )


def test_a_long_fit_says_its_estimate_then_how_far_it_is() -> None:
    now = [0.0]
    lines: list[str] = []
    meter = fit_cost.Meter(5000, budget=3600, say=lines.append, clock=lambda: now[0])
    for step in (2.0, 4.0, 5.0, 12.0, 13.0):
        now[0] = step
        meter()
    assert lines == [
        "fit: one replay of its 5,000 requests took 2.0 s; the fit takes ~80 s",
        "fit: 4 replays, 12 s so far",
    ]
    quick = fit_cost.Meter(50, budget=3600, say=lines.append, clock=lambda: 0.01)
    quick()
    assert len(lines) == 2  # a fit of seconds says nothing


def test_a_run_directory_is_read_through_its_requests_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.jsonl").write_bytes(b"{}\n")
    fit_cost.check_sources([str(run)])  # a directory is no regular file, its file is
    os.remove(run / "requests.jsonl")
    with pytest.raises(ValueError, match=r"requests\.jsonl: not a regular file"):
        fit_cost.check_sources([str(run)])


@pytest.mark.parametrize(("holdout", "keeps"), [("1e-300", "keeps 0 of"), ("0.1", "keeps 6 of")])
def test_a_holdout_too_small_to_judge_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], holdout: str, keeps: str
) -> None:
    requests = [twin.Request(float(i), 100, 10) for i in range(60)]
    log = capture(tmp_path / "proxy.log", presets.load(BASE), requests)
    out = ("--preset", BASE, "--out", tmp_path / "fitted.toml", "--holdout", holdout)
    said = refused(capsys, log, *out)
    assert f"--holdout {holdout}: {keeps} the capture's 60 requests" in said
    assert "needs at least 10: give at least 0.17" in said


def test_a_json_document_on_one_line_is_no_long_line(tmp_path: Path) -> None:
    document = tmp_path / "benchmark.json"  # how other tools write theirs: compact, one line
    document.write_bytes(b'{"benchmarks": [' + b'{"x": 1},' * 20_000 + b'{"x": 1}]}\n')
    fit_cost.check_sources([str(document)])


def test_the_held_out_floor_holds_for_each_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = capture(tmp_path / "big.log", presets.load(BASE), swelled(100))
    small = capture(tmp_path / "small.log", presets.load(BASE), swelled(20))
    out = ("--preset", BASE, "--out", tmp_path / "fitted.toml")
    said = refused(capsys, big, small, *out)  # 0.3 of 20 is 6: each source is judged alone
    assert "--holdout 0.3: keeps 6 of the capture's 20 requests" in said


def swelled(n: int) -> list[twin.Request]:
    return [twin.Request(float(i), 100, 10) for i in range(n)]
