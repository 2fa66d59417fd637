"""The charts of one run directory: latency CDFs, the timeline, a sweep's throughput against
latency, the Pareto front and where the time went. Pure: records and summary in, Figures out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis import slices, timesplit
from loadgen.analysis.records import Record, RunData
from loadgen.reports.charts import slices as slices_chart
from loadgen.reports.charts.model import (
    DOWNSAMPLING,
    Band,
    Bar,
    Chart,
    Figure,
    Mark,
    Rule,
    Series,
    Stacked,
    cdf,
    thin,
)
from loadgen.reports.formatting import ms, pct

CDF_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
CDF_MARKS = ("p50", "p99")
SLO_AXES = {"ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2e"}


def _names(data: RunData, summary: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys([*summary["targets"], *(r.target for r in data.records)]))


def _measured(data: RunData, name: str, level: float | None) -> list[Record]:
    return [
        r
        for r in data.records
        if r.target == name and r.ok and not r.excluded and (level is None or r.level == level)
    ]


def top_level(summary: Mapping[str, Any]) -> float | None:
    """The level a sweep's top-level targets describe (its highest); None for one level."""
    points = (summary.get("sweep") or {}).get("points")
    return points[-1]["level"] if points else None


def _tip(name: str, label: str, key: str, block: Mapping[str, Any]) -> str:
    """A percentile's hover: the same cell report.md prints, with its sample count."""
    return f"{name} {label} {key.upper()} {pct(block, key)} ms (n={block['count']})"


def latency_cdfs(
    entries: Sequence[tuple[str, Sequence[Record], Mapping[str, Any] | None]], note: str = ""
) -> Figure:
    """One CDF per metric, a line per (name, measured records, summary metrics) entry; the
    summary's P50 and P99 marked on each line, their hover the summary's own figures."""
    charts = []
    for key, label in CDF_METRICS:
        series, marks = [], []
        for group, (name, records, metrics) in enumerate(entries):
            values = [getattr(r, key) * 1e3 for r in records if getattr(r, key) is not None]
            if values:
                series.append(Series(name, cdf(values), group=group))
            block = (metrics or {}).get(key)
            for p in CDF_MARKS:
                if block and block.get(p) is not None:
                    at = 0.5 if p == "p50" else 0.99
                    marks.append(Mark(block[p] * 1e3, at, _tip(name, label, p, block), group=group))
        charts.append(
            Chart(
                f"cdf-{key[:-2]}",
                f"{label} CDF",
                f"{label} (ms)",
                "fraction of requests",
                tuple(series),
                tuple(marks),
                note=note,
            )
        )
    return Figure("latency_cdf.png", "Latency CDFs", tuple(charts), columns=3)


def cdfs(data: RunData, summary: Mapping[str, Any]) -> Figure:
    """The run's CDFs: for a sweep, of its highest level, which the summary's targets hold."""
    level = top_level(summary)
    note = "" if level is None else f"the sweep's highest level ({level:g}), as Figures shows"
    entries = [
        (name, _measured(data, name, level), summary["targets"].get(name, {}).get("metrics"))
        for name in _names(data, summary)
    ]
    return latency_cdfs(entries, note)


def _steady_at(summary: Mapping[str, Any]) -> dict[tuple[str, float | None], bool]:
    """(target, level) -> steady; a summary from before steady state was judged: steady."""
    points = (summary.get("sweep") or {}).get("points") or [{"level": None, **summary}]
    out = {}
    for point in points:
        for name, t in point["targets"].items():
            out[(name, point["level"])] = (t.get("steady_state") or {"steady": True})["steady"]
    return out


def _bands(data: RunData, summary: Mapping[str, Any], t0: float) -> tuple[Band, ...]:
    steady = _steady_at(summary)
    bands = []
    for p in data.phases:
        judged = steady.get((p.target, p.level), steady.get((p.target, None), True))
        level = "" if p.level is None else f" at {p.level:g}"
        state = "" if judged else " (saturated)"
        label = f"{p.target} block {p.block}{level}{state}"
        bands.append(Band(p.start_at - t0, p.busy[1] - t0, label, alarm=not judged))
    return tuple(bands)


def _failing_slices(summary: Mapping[str, Any], key: str, t0: float) -> tuple[Band, ...]:
    """Slices that failed this chart's SLO (or E2E's, which no timeline has a chart of) as red
    stretches, every SLO they failed as the tip."""
    bands = []
    for name, t in summary["targets"].items():
        for s in t.get("slices") or []:
            failed = [m for m, j in (s.get("slo") or {}).items() if j["verdict"] == slices.FAIL]
            if SLO_AXES[key] not in failed and "e2e" not in failed:
                continue
            start = s["start_at"] - t0
            label = f"{name} slice {slices.span(s)}: {'; '.join(slices.failures(s))}"
            bands.append(Band(start, start + s["end_s"] - s["start_s"], label, alarm=True))
    return tuple(bands)


def _slice_steps(summary: Mapping[str, Any], name: str, key: str, t0: float) -> Series | None:
    """A target's P90 per time slice as steps on the timeline, where the summary has slices."""
    found = [s for s in summary["targets"].get(name, {}).get("slices") or [] if s.get(key)]
    points, tips = [], []
    for s in found:
        value = s[key].get("p90")
        if value is None or "start_at" not in s:
            continue
        start = s["start_at"] - t0
        end = start + (s["end_s"] - s["start_s"])
        points += [(start, value * 1e3), (end, value * 1e3)]
        tip = f"{name} slice {slices.span(s)}: P90 {ms(value)} ms"
        tips += [tip, tip]
    if not points:
        return None
    return Series(f"{name} P90 per slice", tuple(points), "step", True, tips=tuple(tips))


def timeline(data: RunData, summary: Mapping[str, Any]) -> Figure:
    """TTFT and TPOT per request over time (blocks shaded, saturated ones red, slices' P90
    as steps, slices that failed the chart's SLO red), GPU memory and power on the same axis
    when sampled."""
    t0 = min((r.intended_at for r in data.records), default=0.0)
    bands = _bands(data, summary, t0)
    charts = []
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        series = []
        for group, name in enumerate(_names(data, summary)):
            rows = sorted(
                (r.intended_at - t0, getattr(r, key) * 1e3, r.request_id)
                for r in data.records
                if r.target == name and r.ok and getattr(r, key) is not None
            )
            kept = [rows[i] for i in thin([(x, y) for x, y, _ in rows])]
            if kept:
                tips = tuple(
                    f"{name} {label} {y:.1f} ms at {x:.1f} s ({rid})" for x, y, rid in kept
                )
                points = tuple((x, y) for x, y, _ in kept)
                series.append(Series(name, points, "scatter", group=group, tips=tips))
            steps = _slice_steps(summary, name, key, t0)
            if steps:
                series.append(Series(steps.name, steps.points, "step", True, group, steps.tips))
        charts.append(
            Chart(
                f"timeline-{key[:-2]}",
                f"{label} per request",
                "seconds since start",
                f"{label} (ms)",
                tuple(series),
                bands=bands + _failing_slices(summary, key, t0),
                note=DOWNSAMPLING,
            )
        )
    charts += _gpu_charts(data, t0)
    return Figure("timeline.png", "Timeline", tuple(charts))


def _gpu_charts(data: RunData, t0: float) -> list[Chart]:
    charts = []
    for attr, label, unit in (("memory_mib", "GPU memory", "MiB"), ("power_w", "GPU power", "W")):
        lines: dict[str, list[tuple[float, float]]] = {}
        for s in data.gpu:
            value = getattr(s, attr)
            if value is not None:
                lines.setdefault(f"gpu {s.gpu}", []).append((s.at - t0, value))
        if lines:
            series = tuple(
                Series(
                    name,
                    tuple(points),
                    tips=tuple(f"{name} {label} {y:g} {unit} at {x:.1f} s" for x, y in points),
                    group=i,
                )
                for i, (name, points) in enumerate(lines.items())
            )
            charts.append(
                Chart(f"gpu-{attr}", label, "seconds since start", f"{label} ({unit})", series)
            )
    return charts


def _slo_rule(settings_slo: Mapping[str, float], key: str) -> tuple[Rule, ...]:
    limit = settings_slo.get(SLO_AXES[key])
    return () if limit is None else (Rule(limit * 1e3, f"SLO {limit * 1e3:g} ms"),)


def _levels(summary: Mapping[str, Any]) -> list[tuple[float | None, Mapping[str, Any]]]:
    sweep = summary.get("sweep")
    if sweep:
        return [(p["level"], p["targets"]) for p in sweep["points"]]
    return [(None, summary["targets"])]


def sweep(summary: Mapping[str, Any], slo: Mapping[str, float]) -> Figure:
    """A sweep's throughput–latency curves: P50 and P99 against output tok/s per target,
    each level's point hoverable, saturated levels ringed, the SLO as a line."""
    levels = _levels(summary)
    names = list(dict.fromkeys(n for _, targets in levels for n in targets))
    charts = []
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        series, marks = [], []
        for group, name in enumerate(names):
            at = [(lvl, ts[name]) for lvl, ts in levels if name in ts]
            for p, dashed in (("p50", False), ("p99", True)):
                pts, tips = [], []
                for lvl, t in at:
                    value = t["metrics"][key][p]
                    tokens = t["throughput"]["output_tokens_per_s"]
                    if value is None or tokens is None:
                        continue
                    pts.append((tokens, value * 1e3))
                    tips.append(
                        f"{name} at {lvl:g}: {tokens:.1f} output tok/s, "
                        f"{_tip(name, label, p, t['metrics'][key]).removeprefix(name + ' ')}"
                    )
                    if not (t.get("steady_state") or {"steady": True})["steady"]:
                        marks.append(
                            Mark(tokens, value * 1e3, f"{name} at {lvl:g}: saturated", "ring")
                        )
                if pts:
                    series.append(
                        Series(
                            f"{name} {p.upper()}", tuple(pts), "line", dashed, group, tuple(tips)
                        )
                    )
        charts.append(
            Chart(
                f"sweep-{key[:-2]}",
                f"{label} against throughput",
                "output tokens/s",
                f"{label} (ms)",
                tuple(series),
                tuple(marks),
                _slo_rule(slo, key),
            )
        )
    return Figure("throughput_latency.png", "Throughput against latency", tuple(charts), 2)


def front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The Pareto front of (per user, per GPU) points, both higher-is-better, by x."""
    kept = [p for p in points if not any(q != p and q[0] >= p[0] and q[1] >= p[1] for q in points)]
    return sorted(set(kept))


def pareto_points(
    levels: Sequence[tuple[str, float | None, Mapping[str, Any]]], gpus: int
) -> dict[str, list[tuple[float, float, str]]]:
    """(tok/s per user, tok/s per GPU, hover) per target, from (target, level, metrics)
    triples: per user is 1 / mean TPOT (each stream's decode speed), as vLLM's sweep plots it."""
    out: dict[str, list[tuple[float, float, str]]] = {}
    for name, level, t in levels:
        tpot = t["tpot_mean_s"]
        tokens = t["output_tokens_per_s"]
        if not tpot or tokens is None:
            continue
        user, gpu = 1 / tpot, tokens / gpus
        at = "" if level is None else f" at {level:g}"
        tip = f"{name}{at}: {user:.1f} tok/s per user, {gpu:.1f} tok/s per GPU ({gpus} GPUs)"
        out.setdefault(name, []).append((user, gpu, tip))
    return out


def pareto(points: Mapping[str, list[tuple[float, float, str]]], gpus: int) -> Figure:
    """Each level (or probe) as a point, each target's front as a line through its best."""
    series = []
    for group, (name, found) in enumerate(points.items()):
        tips = {(x, y): tip for x, y, tip in found}
        series.append(
            Series(
                name,
                tuple((x, y) for x, y, _ in found),
                "scatter",
                group=group,
                tips=tuple(tip for _, _, tip in found),
            )
        )
        best = front(list(tips))
        series.append(
            Series(f"{name} front", tuple(best), "line", True, group, tuple(tips[p] for p in best))
        )
    chart = Chart(
        "pareto",
        "Pareto front",
        "output tokens/s per user (1 / mean TPOT)",
        f"output tokens/s per GPU ({gpus} GPU{'s' if gpus != 1 else ''})",
        tuple(series),
        note="up and right is better: a point below or left of the front is beaten by another",
    )
    return Figure("pareto.png", "Pareto front", (chart,))


def run_pareto(summary: Mapping[str, Any], gpus: int) -> Figure | None:
    triples = [
        (
            name,
            level,
            {
                "tpot_mean_s": t["metrics"]["tpot_s"]["mean"],
                "output_tokens_per_s": t["throughput"]["output_tokens_per_s"],
            },
        )
        for level, targets in _levels(summary)
        for name, t in targets.items()
    ]
    points = pareto_points(triples, gpus)
    return pareto(points, gpus) if points else None


def time_split(summary: Mapping[str, Any]) -> Figure | None:
    """Where the time went: each target's mean TTFT and E2E as stacked parts, in ms."""
    bars = tuple(
        Bar(
            f"{name} {split.figure}",
            tuple((label, max(0.0, value) * 1e3) for label, value in split.parts),
        )
        for name, t in summary["targets"].items()
        for split in timesplit.splits(t)
    )
    if not bars:
        return None
    chart = Stacked("time-split", "Where the time went", "mean (ms)", bars, dict(timesplit.MEANING))
    return Figure("time_split.png", "Where the time went", (chart,))


def figures(data: RunData, summary: Mapping[str, Any]) -> list[Figure]:
    """Every figure a run's report shows, in the order it shows them."""
    found: list[Figure | None] = [cdfs(data, summary), timeline(data, summary)]
    if summary.get("sweep"):
        found.append(sweep(summary, data.settings.slo))
    found.append(slices_chart.figure(summary))
    found.append(run_pareto(summary, data.settings.gpus))
    found.append(time_split(summary))
    return [f for f in found if f is not None]
