"""How a figure is written, in report.md, report.html and the console alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis import stats


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.1f}"


def pct(block: Mapping[str, Any], key: str) -> str:
    """A percentile in ms with its 95% CI; "n/a (needs ≥N)" where the sample cannot bound it."""
    value = block.get(key)
    if value is None:
        need = stats.min_samples(stats.PERCENTILES[key])
        return f"n/a (needs ≥{need})" if block.get("count") else "—"
    ci = (block.get("ci95") or {}).get(key)
    if not ci:
        return ms(value)
    low, high = ("…" if bound is None else ms(bound) for bound in ci)  # … a side left unbounded
    return f"{ms(value)} [{low}–{high}]"


def rate(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.2f}{unit}"


def trace_link(template: str | None, trace_id: str) -> str | None:
    """--trace-url's template with the trace id filled in."""
    return template.replace("{trace_id}", trace_id) if template else None


def fell_behind(t: dict[str, Any]) -> bool:
    """An open-loop target saturated: its latency percentiles grow with the run's length."""
    state = t.get("steady_state")
    return state is not None and not state["steady"] and state.get("loop") == "open"


def sustained(t: dict[str, Any]) -> float | None:
    """The one throughput a target's tables and sentences give, in requests/s: what it
    completed inside its window when it fell behind (the requests the drain let finish
    after the window would make a saturated server look faster than it is), else its
    measured throughput."""
    if fell_behind(t) and t["steady_state"].get("completion_per_s") is not None:
        return t["steady_state"]["completion_per_s"]
    return t["throughput"]["requests_per_s"]
