"""The fit checks where it writes before it fits: never over an input, never a fitted preset
named fit.json, never into a place it cannot write; a folder that does not exist is made,
as loadgen's --out makes one."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.sim import twin
from loadgen.sim.model import presets
from tests.sim.twin.test_fit import BASE, capture, fit_cli


@pytest.fixture
def log(tmp_path: Path) -> Path:
    requests = [twin.Request(float(i), 100, 10) for i in range(60)]
    return capture(tmp_path / "victim.log", presets.load(BASE), requests)


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("{log}", "would replace the input"),
        ("{dir}/fit.json", "fit.json is written beside the preset"),
        ("{dir}", "a directory"),
        ("/proc/f.toml", "cannot write there"),
    ],
)
def test_an_output_it_must_not_write_is_refused_before_the_fit(
    tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str], out: str, says: str
) -> None:
    before = log.read_bytes()
    given = out.format(log=log, dir=tmp_path)
    with pytest.raises(SystemExit) as exit_:
        fit_cli(log, "--preset", BASE, "--out", given)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--out {given}" in err and says in err, err
    assert log.read_bytes() == before and sorted(tmp_path.iterdir()) == [log]


def test_fit_json_beside_a_preset_in_the_capture_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = [twin.Request(float(i), 100, 10) for i in range(60)]
    log = capture(tmp_path / "fit.json", presets.load(BASE), requests)
    with pytest.raises(SystemExit):
        fit_cli(log, "--preset", BASE, "--out", tmp_path / "fitted.toml")
    assert "would replace the input" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == [log]


def test_a_folder_that_does_not_exist_is_made(tmp_path: Path, log: Path) -> None:
    out = tmp_path / "new" / "deeper" / "fitted.toml"
    fit_cli(log, "--preset", BASE, "--out", out)
    assert out.is_file() and (out.parent / "fit.json").is_file()
