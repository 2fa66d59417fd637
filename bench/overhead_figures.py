"""bench/proxy_overhead.py's figures: one row per measured cell, then per cell shape the median
over the interleaved repeats with its interval, the fitted per-request cost, and the goals.

The box is shared, so no absolute time is compared across cells: every "added" figure is taken
against the direct path and every ratio against nginx *of the same repeat* (cells of one repeat
run back to back), and only then summarised over repeats. A summary is the median of the
repeats with loadgen.analysis.stats' distribution-free order-statistic 95% interval of that median
(with 6 repeats: [min, max]; 5 cannot bound it at 95%, and the interval then says so with a
None side), and the min and max: the spread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from overhead_client import CellResult  # bench/, beside this module

from loadgen.analysis import stats

Shape = tuple[int, int, bool]  # streams, tokens, stream


def _quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def row(cell: CellResult, repeat: int) -> dict:
    """The figures of one cell run on its own."""
    cpu = cell.cpu_s.get("intermediary")
    return {
        "target": cell.target,
        "streams": cell.streams,
        "tokens": cell.tokens,
        "stream": cell.stream,
        "repeat": repeat,
        "requests": cell.requests,
        "completed": cell.completed,
        "errors": sum(cell.errors.values()),
        "events_per_s": cell.events / cell.window_s,
        "requests_per_s": cell.completed / cell.window_s,
        "ttft_p50_ms": _ms(_quantile(cell.ttft_s, 0.5)),
        "ttft_p99_ms": _ms(_quantile(cell.ttft_s, 0.99)),
        "inter_event_p99_ms": _ms(_quantile(cell.itl_s, 0.99)),
        "e2e_p50_ms": _ms(_quantile(cell.e2e_s, 0.5)),
        "cpu_us_per_event": cpu / cell.events * 1e6 if cpu is not None and cell.events else None,
        "cpu_us_per_request": (
            cpu / cell.completed * 1e6 if cpu is not None and cell.completed else None
        ),
        "events_per_request": cell.events / cell.completed if cell.completed else None,
        "rss_mib": cell.rss_bytes / 2**20 if cpu is not None else None,
        "upstream_cpu_pct": 100 * cell.cpu_s["upstream"] / cell.window_s,
        "client_cpu_pct": 100 * cell.cpu_s["client"] / cell.window_s,
    }


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or a <= 0 or b <= 0 else a / b


def compare(rows: list[dict]) -> None:
    """Add, in place, each row's figures against direct and nginx of the same repeat."""
    by_run = {(r["repeat"], r["streams"], r["tokens"], r["stream"], r["target"]): r for r in rows}
    for r in rows:
        key = (r["repeat"], r["streams"], r["tokens"], r["stream"])
        direct, nginx = by_run.get((*key, "direct")), by_run.get((*key, "nginx"))
        if r["target"] != "direct" and direct is not None:
            for name in ("ttft_p50_ms", "ttft_p99_ms", "inter_event_p99_ms", "e2e_p50_ms"):
                r[f"added_{name}"] = _difference(r[name], direct[name])
            r["events_vs_direct"] = _ratio(r["events_per_s"], direct["events_per_s"])
            r["requests_vs_direct"] = _ratio(r["requests_per_s"], direct["requests_per_s"])
        if r["target"] not in ("direct", "nginx") and nginx is not None:
            for name in ("cpu_us_per_event", "cpu_us_per_request", "rss_mib"):
                r[f"{name}_vs_nginx"] = _ratio(r[name], nginx[name])


def fit(rows: Iterable[dict]) -> list[dict]:
    """Per repeat, target and concurrency: CPU per request = intercept + slope × events per
    request, least squares over the streaming cells' token counts (8/64/256): the intercept
    is the per-request cost, the slope the per-event cost, each free of the other.

    Each cell's residual is weighted by 1 / its CPU per request: a cell's noise grows with
    its CPU (a 256-token request's ±10% is more than a short request's whole cost), so an
    unweighted fit lets the longest cell alone decide the intercept."""
    groups: dict[tuple[int, str, int], list[dict]] = defaultdict(list)
    for r in rows:
        if r["stream"] and r["cpu_us_per_request"] is not None:
            groups[(r["repeat"], r["target"], r["streams"])].append(r)
    fits = []
    for (repeat, target, streams), members in sorted(groups.items()):
        if len({m["tokens"] for m in members}) < 2:
            continue
        x = [m["events_per_request"] for m in members]
        y = [m["cpu_us_per_request"] for m in members]
        weights = [1 / value for value in y] if min(y) > 0 else None  # direct: no CPU of its own
        slope, intercept = np.polyfit(x, y, 1, w=weights)
        fits.append(
            {
                "repeat": repeat,
                "target": target,
                "streams": streams,
                "tokens": sorted(m["tokens"] for m in members),
                "intercept_us_per_request": float(intercept),
                "slope_us_per_event": float(slope),
            }
        )
    by_run = {(f["repeat"], f["streams"], f["target"]): f for f in fits}
    for f in fits:
        nginx = by_run.get((f["repeat"], f["streams"], "nginx"))
        if f["target"] not in ("direct", "nginx") and nginx is not None:
            f["slope_vs_nginx"] = _ratio(f["slope_us_per_event"], nginx["slope_us_per_event"])
    return fits


def spread(values: Iterable[float | None]) -> dict | None:
    """Median over repeats, its order-statistic 95% interval, min, max and n."""
    data = np.sort(np.asarray([v for v in values if v is not None], dtype=np.float64))
    if not len(data):
        return None
    ci = stats.percentile_ci(data, 0.5) or (None, None)
    return {
        "median": float(np.median(data)),
        "ci95": list(ci),
        "min": float(data[0]),
        "max": float(data[-1]),
        "n": len(data),
    }


SUMMARISED = (
    "requests",
    "errors",
    "events_per_s",
    "requests_per_s",
    "ttft_p50_ms",
    "added_ttft_p50_ms",
    "added_ttft_p99_ms",
    "added_inter_event_p99_ms",
    "added_e2e_p50_ms",
    "events_vs_direct",
    "requests_vs_direct",
    "cpu_us_per_event",
    "cpu_us_per_request",
    "cpu_us_per_event_vs_nginx",
    "cpu_us_per_request_vs_nginx",
    "rss_mib",
    "upstream_cpu_pct",
    "client_cpu_pct",
)
FIT_SUMMARISED = ("intercept_us_per_request", "slope_us_per_event", "slope_vs_nginx")


def summarise(rows: Sequence[dict], fits: Sequence[dict]) -> dict:
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r["streams"], r["tokens"], r["stream"], r["target"])].append(r)
    fitted: dict[tuple, list[dict]] = defaultdict(list)
    for f in fits:
        fitted[(f["streams"], f["target"])].append(f)
    return {
        "cells": [
            {
                "streams": streams,
                "tokens": tokens,
                "stream": stream,
                "target": target,
                **{k: spread(m.get(k) for m in members) for k in SUMMARISED},
            }
            for (streams, tokens, stream, target), members in cells.items()
        ],
        "fits": [
            {
                "streams": streams,
                "target": target,
                **{k: spread(m.get(k) for m in members) for k in FIT_SUMMARISED},
            }
            for (streams, target), members in fitted.items()
        ],
    }


@dataclass(frozen=True)
class Goal:
    """One goal: a summarised figure of one cell (or fit) against a bound."""

    text: str
    where: dict  # selects the summary entry: streams/tokens/stream/target (cells) or a fit
    figure: str
    bound: float
    at_most: bool = True  # figure ≤ bound; False: figure ≥ bound
    fitted: bool = False


def goals(streams: int, build: str = "proxy") -> tuple[Goal, ...]:
    """The goals at one concurrency (64 streams in the issue's terms), for one build of the
    proxy: "proxy" (as this tree is built: compiled) or "proxy-pure"."""
    cell64 = {"streams": streams, "tokens": 64, "stream": True, "target": build}
    named = "" if build == "proxy" else f"{build}: "
    return tuple(
        Goal(named + g.text, g.where, g.figure, g.bound, g.at_most, g.fitted)
        for g in (
            Goal(
                "per-request CPU (fitted intercept, 8/64/256 tokens) ≤ 0.3 ms, spans on, "
                "no exporter",
                {"streams": streams, "target": build},
                "intercept_us_per_request",
                300.0,
                fitted=True,
            ),
            Goal(
                "per-request CPU (fitted intercept) ≤ 0.45 ms exporting OTLP/HTTP",
                {"streams": streams, "target": f"{build}+otlp"},
                "intercept_us_per_request",
                450.0,
                fitted=True,
            ),
            Goal(
                "`--tokens 1` non-streaming: CPU per request ≤ 3× nginx's",
                {"streams": streams, "tokens": 1, "stream": False, "target": build},
                "cpu_us_per_request_vs_nginx",
                3.0,
            ),
            Goal(
                "CPU per event at 64 tokens ≤ 2× nginx's", cell64, "cpu_us_per_event_vs_nginx", 2.0
            ),
            Goal(
                "CPU per event at 256 tokens ≤ 1.6× nginx's",
                {**cell64, "tokens": 256},
                "cpu_us_per_event_vs_nginx",
                1.6,
            ),
            Goal("added TTFT p50 ≤ 0.5 ms", cell64, "added_ttft_p50_ms", 0.5),
            Goal("added TTFT p99 ≤ 1.5 ms", cell64, "added_ttft_p99_ms", 1.5),
            Goal("events/s ≥ 99% of direct", cell64, "events_vs_direct", 0.99, at_most=False),
            Goal("memory (RSS) per worker ≤ 46 MiB", cell64, "rss_mib", 46.0),
        )
    )


def judge(goal: Goal, summary: dict) -> dict:
    """met / not met by the median; `sure` when the whole interval is on that side."""
    entries = summary["fits"] if goal.fitted else summary["cells"]
    entry = next((e for e in entries if all(e.get(k) == v for k, v in goal.where.items())), None)
    figure = entry.get(goal.figure) if entry else None
    if figure is None:
        return {"goal": goal.text, "figure": goal.figure, "bound": goal.bound, "verdict": None}

    def ok(value: float) -> bool:
        return value <= goal.bound if goal.at_most else value >= goal.bound

    low, high = figure["ci95"]
    met = ok(figure["median"])
    if low is None or high is None:
        caveat = " (too few runs to bound the median)"
    elif ok(low) == met and ok(high) == met:
        caveat = ""
    else:
        caveat = " (the interval straddles the bound)"
    return {
        "goal": goal.text,
        "figure": goal.figure,
        "bound": goal.bound,
        **figure,
        "verdict": ("met" if met else "not met") + caveat,
    }
