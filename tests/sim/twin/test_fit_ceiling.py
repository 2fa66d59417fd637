"""A fit that runs into a GPU's ceiling says so, and what the capture needed."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import tomllib
from pathlib import Path

import pytest

from loadgen.sim import twin
from loadgen.sim.model import catalogue, derived, hf_config
from loadgen.sim.twin import fit
from tests.sim.twin.test_fit import capture, fit_cli

CONFIG = Path(__file__).parent.parent / "model" / "configs" / "llama-3-8b.json"


def bursts(n: int, seed: int = 1) -> list[twin.Request]:
    """Short requests in bursts: steps of one sequence to tens, prompts of a few tokens to
    thousands, few enough decode steps for a fit to replay them quickly."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(2 + 60 * math.sin(math.pi * i / 40) ** 2)
        prompt = int(min(3000, rng.lognormvariate(math.log(400), 1.0))) + 1
        out.append(twin.Request(t, prompt, rng.randint(8, 40)))
    return out


@pytest.mark.slow
def test_a_capture_faster_than_the_datasheet_allows_ends_the_fit_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The capture's GPU streams 1.3x the bandwidth its datasheet (the catalogue's) says: at
    MBU 0.7 of the real bandwidth, it needs about 0.91 of the stated one, above the 0.77
    ceiling. The fit keeps MBU at the ceiling rather than the base's 0.63, and says why."""
    gpu, shape = catalogue.gpu("h100-sxm"), hf_config.read(CONFIG)
    base = derived.preset(gpu, shape, "bf16", 1, str(CONFIG))
    hw = base.perf.hardware
    faster = dataclasses.replace(hw, hbm_bandwidth=hw.hbm_bandwidth * 1.3, mbu_ceiling=0.99)
    hidden = fit.with_terms(
        dataclasses.replace(base, perf=dataclasses.replace(base.perf, hardware=faster)),
        {"mbu": 0.7},
    )
    log = capture(tmp_path / "proxy.log", hidden, bursts(120))
    out = tmp_path / "fitted.toml"
    with pytest.raises(SystemExit) as exit_:
        fit_cli(log, "--gpu", "h100-sxm", "--model-config", CONFIG, "--dtype", "bf16", "--out", out)
    assert exit_.value.code == 3
    report = json.loads((tmp_path / "fit.json").read_text())
    pinned = report["at_ceiling"]["mbu"]
    assert pinned["ceiling"] == 0.77
    # linearised from where the search stopped, with the other terms as they were there: an
    # estimate above the ceiling, short of the truth (0.91) when others absorbed part of it
    assert 0.77 < pinned["needed"] <= 0.7 * 1.3 * 1.1
    assert "mbu" not in report["not_identified"]
    err = capsys.readouterr().err
    assert "the capture is faster than this GPU's datasheet bandwidth allows at MBU 0.77" in err
    assert "check --gpu, the dtype, or the ceiling" in err
    written = tomllib.loads(out.read_text())
    assert written["efficiency"]["mbu"] == pytest.approx(0.77, rel=0.01)
    assert "uncalibrated" not in written
    assert set(report["fitted_load"]) == set(report["held_out"])
