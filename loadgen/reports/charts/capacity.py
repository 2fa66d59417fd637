"""The charts of a capacity search, from capacity.json alone: latency at each SLO's
percentile against throughput (the SLO as a line, each target's capacity starred, saturated
probes ringed) and the probes' Pareto front."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis.slo import LABELS, METRICS, percentile_label
from loadgen.reports.charts.model import Chart, Figure, Mark, Rule, Series
from loadgen.reports.charts.run import pareto, pareto_points
from loadgen.reports.formatting import ms


def _judged(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    return sorted((p for p in t["probes"] if not p["interrupted"]), key=lambda p: p["level"])


def knees(result: Mapping[str, Any]) -> Figure:
    unit = "req/s" if result["by"] == "rate" else "streams"
    charts = []
    for metric, slo in result["slo"].items():
        pct, label = slo["percentile"], LABELS[metric]
        series, marks = [], []
        for group, (name, t) in enumerate(result["targets"].items()):
            points, tips = [], []
            for p in _judged(t):
                value = p[METRICS[metric]].get(pct)
                tokens = p["output_tokens_per_s"]
                if value is None or tokens is None:
                    continue
                xy = (tokens, value * 1e3)
                verdict = p.get("outcome") or ("meets" if p["meets"] else "fails")
                points.append(xy)
                tips.append(
                    f"{name} at {p['level']:g} {unit}: {label} {percentile_label(pct)} "
                    f"{ms(value)} ms, {tokens:.0f} output tok/s; {verdict}"
                )
                if not p["steady"]:
                    marks.append(Mark(*xy, f"{name} at {p['level']:g} {unit}: saturated", "ring"))
                if p["level"] == t["capacity"]:
                    tip = f"{name}: capacity {t['capacity']:g} {unit}"
                    marks.append(Mark(*xy, tip, "star", group))
            if points:
                series.append(Series(name, tuple(points), "line", group=group, tips=tuple(tips)))
        charts.append(
            Chart(
                f"capacity-{metric}",
                f"{label} {percentile_label(pct)} against throughput",
                "output tokens/s",
                f"{label} {percentile_label(pct)} (ms)",
                tuple(series),
                tuple(marks),
                (Rule(slo["limit_s"] * 1e3, f"SLO {slo['limit_s'] * 1e3:g} ms"),),
                note="★ capacity (the highest level that meets every SLO); ring: saturated",
            )
        )
    return Figure("capacity.png", "Capacity: latency against throughput", tuple(charts), 2)


def probes_pareto(result: Mapping[str, Any]) -> Figure | None:
    gpus = result.get("gpus", 1)  # capacity.json from before --gpus was recorded: one
    triples = [
        (
            name,
            p["level"],
            {
                "tpot_mean_s": p["tpot_s"].get("mean"),
                "output_tokens_per_s": p["output_tokens_per_s"],
            },
        )
        for name, t in result["targets"].items()
        for p in _judged(t)
    ]
    points = pareto_points(triples, gpus)
    return pareto(points, gpus) if points else None


def figures(result: Mapping[str, Any]) -> list[Figure]:
    found = [knees(result), probes_pareto(result)]
    return [f for f in found if f is not None]
