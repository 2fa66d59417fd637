"""What a candidate's prediction rests on, and how far it may be off. Pure.

Four kinds, from the best backed to the least:

- **fitted**: a preset fitted to a capture of this GPU (a preset file with a [fit] table, or
  `--twin FITTED.toml`): the fit's held-out error, of the binding SLO's figure when the fit
  checked it, else the mean of the four it checked.
- **carried**: `--twin`'s efficiency terms carried over to another GPU that serves the same
  model in the same dtype: the fit's error plus CARRIED, since MBU and MFU move between GPUs
  and kernels.
- **bundled**: a bundled preset calibrated against published measurements
  (docs/sim/calibration.md: throughput and TPOT within about 10% under load): BUNDLED.
- **datasheet**: a preset marked uncalibrated (datasheet figures, borrowed efficiencies):
  DATASHEET, an assumption no measurement backs.

A preset file without [fit] and not bundled counts as a datasheet. Every kind adds the
capacity search's own precision (its bracket is within 5%). The uncertainty is relative, on
the capacity a candidate's search found; ranking turns it into a range of replicas and cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.capacity.search import PRECISION
from loadgen.sim.model.presets import Preset

BUNDLED = 0.10
DATASHEET = 0.30
CARRIED = 0.15
WORDS = {
    "fitted": "fitted on this GPU",
    "carried": "carried over from a fit on another GPU",
    "bundled": "a bundled preset calibrated against published measurements",
    "datasheet": "a datasheet preset: uncalibrated",
}


def kind(preset: Preset, bundled: bool, carried_from: str = "") -> str:
    if carried_from:
        return "carried"
    if preset.fit:
        return "fitted"
    if bundled and not preset.uncalibrated:
        return "bundled"
    return "datasheet"


def _fit_error(fit: Mapping[str, float], binding: Mapping[str, Any] | None) -> tuple[float, str]:
    key = f"{binding['metric']}_{binding['percentile']}" if binding else ""
    if key in fit:
        return abs(
            fit[key]
        ), f"held-out error {abs(fit[key]):.1%} on {key.replace('_', ' ').upper()}"
    return abs(fit["error"]), f"held-out error {abs(fit['error']):.1%}"


def of(
    preset: Preset,
    bundled: bool,
    binding: Mapping[str, Any] | None,
    carried_from: str = "",
) -> dict[str, Any]:
    """plan.json's `basis` of one candidate: its kind, the relative uncertainty of its
    capacity and the words for it."""
    found = kind(preset, bundled, carried_from)
    if found in ("fitted", "carried"):
        assert preset.fit is not None, "a fitted or carried preset has a [fit]"
        error, said = _fit_error(preset.fit, binding)
        if found == "carried":
            error += CARRIED
            said = f"carried over from a fit on {carried_from} ({said}, +{CARRIED:.0%})"
        else:
            said = f"fitted on this GPU ({said})"
    elif found == "bundled":
        error, said = BUNDLED, f"{WORDS['bundled']}, ±{BUNDLED:.0%}"
    else:
        error, said = DATASHEET, f"{WORDS['datasheet']}, ±{DATASHEET:.0%} assumed"
    return {"kind": found, "uncertainty": error + PRECISION, "said": said}
