"""One probe against the SLOs: meets, fails or undecided — by its intervals. Pure.

A probe's percentile is an estimate; its 95% interval (stats.percentile_ci, distribution-
free) says where the true one lies. So a probe:

- *fails* when any SLO's interval lies wholly above its limit, the level is saturated
  (steady.py) or more than MAX_FAILED of its requests failed — any one is enough, however
  sure the rest is;
- *meets* when every SLO's interval lies wholly at or below its limit and the level is
  steady, its warm-up settled and its TTFT did not still rise;
- is *undecided* otherwise: an interval straddles its limit (or a side of it cannot be
  bounded with this many requests), the warm-up reached its cap while the in-flight count
  still grew, or TTFT still rose through the window without (yet) growing enough to call
  the level saturated. A longer probe can tell; the search extends it.

A client that fell behind (`valid` false: its send or event-loop lag over the run's limit)
only ever makes latencies look longer, by up to its lag: so its probe's intervals are read
with their lower ends lowered by that lag (P99 of either). An interval still wholly under
the limit meets, one still wholly above fails; one that the lag makes straddle is undecided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis import steady
from loadgen.analysis.slo import METRICS, Slos, named

MEETS, FAILS, UNDECIDED = "meets", "fails", "undecided"
MAX_FAILED = 0.01  # a probe with more failed requests than this fails


def seconds(value: float) -> str:
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.2f} s"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str  # MEETS | FAILS | UNDECIDED
    steady: bool
    valid: bool
    failures: list[str]  # why it fails, in words
    unsure: list[str]  # why it is undecided, in words
    ratios: dict[str, float]  # SLO metric -> value / limit (over 1: missed)
    intervals: dict[str, dict[str, Any]]  # SLO metric -> value, ci95, limit, side

    @property
    def meets(self) -> bool:
        return self.outcome == MEETS


def _side(low: float | None, high: float | None, limit: float) -> str:
    """Where a percentile's interval lies against its limit: under, above or straddles."""
    if high is not None and high <= limit:
        return "under"
    if low is not None and low > limit:
        return "above"
    return "straddles"


def _interval(value: float, ci: Any, limit: float) -> str:
    low, high = ci if ci else (None, None)
    words = f"[{'—' if low is None else seconds(low)}, {'—' if high is None else seconds(high)}]"
    return f"{seconds(value)} {words} against {seconds(limit)}"


def verdict(target: Mapping[str, Any], slos: Slos) -> Verdict:
    """One probe's summary (targets.<name> of its summary.json) against the SLOs."""
    failures: list[str] = []
    unsure: list[str] = []
    ratios: dict[str, float] = {}
    intervals: dict[str, dict[str, Any]] = {}
    blur = 0.0 if target["valid"] else _client_lag(target)
    for metric, limit in slos.limits.items():
        pct = slos.percentile(metric)
        block = target["metrics"][METRICS[metric]]
        value = block[pct]
        name = named(metric, pct)
        if value is None:
            unsure.append(f"{name}: too few samples")
            continue
        ci = (block.get("ci95") or {}).get(pct)
        low, high = ci or (None, None)
        side = _side(None if low is None else low - blur, high, limit)
        ratios[metric] = value / limit
        intervals[metric] = {"value": value, "ci95": ci, "limit": limit, "side": side}
        if side == "above":
            failures.append(f"{name} {_interval(value, ci, limit)}")
        elif side == "straddles":
            widened = f" (widened by the client's {seconds(blur)} lag)" if blur else ""
            unsure.append(
                f"{name} {_interval(value, ci, limit)}: its interval straddles the limit{widened}"
            )
    state = target.get("steady_state") or {"steady": True, "reasons": []}
    if not state["steady"]:
        failures.append("saturated: " + "; ".join(state["reasons"]))
    else:
        unsure += _unsteady(state)
    requests = target["requests"]
    total = requests["ok"] + requests["failed"]
    if total and requests["failed"] > MAX_FAILED * total:
        failures.append(f"{requests['failed']} of {total} requests failed")
    outcome = FAILS if failures else (UNDECIDED if unsure else MEETS)
    return Verdict(outcome, state["steady"], target["valid"], failures, unsure, ratios, intervals)


def _client_lag(target: Mapping[str, Any]) -> float:
    """How much later than the truth the client's timings may be: its lags' P99s."""
    client = target.get("client") or {}
    lags = [client[key] for key in ("send_lag_s", "loop_lag_s") if key in client]
    return max((block.get("p99") or 0.0 for block in lags), default=0.0)


def _unsteady(state: Mapping[str, Any]) -> list[str]:
    """Why a level not called saturated may still not be steady."""
    out = []
    if state.get("settled") is False:
        out.append(
            f"the warm-up ended after {state['warmup_s']:.0f} s with the in-flight count "
            "still growing"
        )
    if state.get("replay"):
        return out  # a trace's TTFT follows its own prompts: its trend says nothing (steady.py)
    ci = state.get("ttft_slope_ci95")
    first, last = state.get("ttft_first_third_s"), state.get("ttft_last_third_s")
    rising = ci and ci[0] > 0
    if rising and first is not None and last is not None and last - first >= steady.GROWTH_FLOOR_S:
        out.append(
            f"TTFT still rose through the window (median {first:.2f} s in its first "
            f"third, {last:.2f} s in its last)"
        )
    return out
