"""The time-slices chart (slices.py's per-slice figures) on one time axis: TTFT P50 and P90,
output tok/s and the backlog per slice, each target a line. Pure: summary in, Figure out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadgen.analysis.slices import span
from loadgen.reports.charts.model import Chart, Figure, Series

Value = Callable[[Mapping[str, Any]], float | None]
X_LABEL = "seconds since the target's first window opened"


def _runs(found: Sequence[Mapping[str, Any]], value: Value) -> list[list[Mapping[str, Any]]]:
    """Slices in unbroken runs: a stretch with none (another target's block) is a gap, as is
    a slice without the value."""
    runs: list[list[Mapping[str, Any]]] = []
    for s in found:
        if value(s) is None:
            runs.append([])
            continue
        if not runs or not runs[-1] or s["start_s"] > runs[-1][-1]["end_s"]:
            runs.append([])
        runs[-1].append(s)
    return [run for run in runs if run]


def _steps(
    name: str, found: Sequence[Mapping[str, Any]], value: Value, what: str, group: int,
    dashed: bool = False, label: str | None = None, unit: str = "",
) -> list[Series]:  # fmt: skip
    series = []
    for run in _runs(found, value):
        points, tips = [], []
        for s in run:
            v = value(s)
            assert v is not None
            tip = f"{name} {span(s)}: {what} {v:.1f}{unit} ({s['sent']} sent)"
            points += [(s["start_s"], v), (s["end_s"], v)]
            tips += [tip, tip]
        series.append(Series(label or name, tuple(points), "step", dashed, group, tuple(tips)))
    return series


def _ms(key: str, pct: str) -> Value:
    def value(s: Mapping[str, Any]) -> float | None:
        v = s[key][pct]
        return None if v is None else v * 1e3

    return value


def figure(summary: Mapping[str, Any]) -> Figure | None:
    targets = [(n, t.get("slices") or []) for n, t in summary["targets"].items()]
    if not any(found for _, found in targets):
        return None
    ttft: list[Series] = []
    tokens: list[Series] = []
    backlog: list[Series] = []
    for group, (name, found) in enumerate(targets):
        for pct, dashed in (("p50", False), ("p90", True)):
            what = f"TTFT {pct.upper()}"
            ttft += _steps(name, found, _ms("ttft_s", pct), what, group, dashed,
                           f"{name} {what}", " ms")  # fmt: skip
        tokens += _steps(name, found, lambda s: s["output_tokens_per_s"], "output tok/s", group)
        backlog += _steps(name, found, lambda s: s["backlog"], "backlog", group)
    charts = (
        Chart("slices-ttft", "TTFT per slice", X_LABEL, "TTFT (ms)", tuple(ttft)),
        Chart("slices-tokens", "Output tokens/s per slice", X_LABEL, "output tok/s", tuple(tokens)),
        Chart("slices-backlog", "Backlog at each slice's end", X_LABEL, "requests", tuple(backlog)),
    )
    return Figure("slices.png", "Time slices", charts)
