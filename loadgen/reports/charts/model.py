"""What a chart is, independent of how it is drawn. Pure data, no I/O.

Values are in the units the axes name (ms, tok/s, MiB, W): the renderers never convert.
A mark's `tip` is the exact text its hover (and the test) shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Point = tuple[float, float]

# matplotlib's default cycle (tab10), so a target has one colour in the PNG and the page
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip

MAX_CDF_POINTS = 200  # per series: evenly spaced in rank, the first and last kept
MAX_TIMELINE_POINTS = 1500  # per series: beyond, every k-th request by send time
DOWNSAMPLING = (
    f"CDFs show at most {MAX_CDF_POINTS} points per target (evenly spaced in rank, the "
    f"fastest and slowest kept); timelines at most {MAX_TIMELINE_POINTS} requests per target "
    "(every k-th by send time, the slowest 1% always kept)"
)


def color(group: int) -> str:
    return PALETTE[group % len(PALETTE)]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: tuple[Point, ...]
    kind: str = "line"  # "line", "scatter" or "step" (points are the steps' corners)
    dashed: bool = False
    group: int = 0  # series of one group share a colour (a target's P50 and P99)
    tips: tuple[str, ...] = ()  # one hover text per point, or none


@dataclass(frozen=True, slots=True)
class Mark:
    """A point worth a hover of its own: a percentile, a knee, a saturated level."""

    x: float
    y: float
    tip: str
    kind: str = "dot"  # "dot", "ring" (saturated) or "star" (capacity)
    group: int = 0


@dataclass(frozen=True, slots=True)
class Rule:
    """A horizontal line across the chart: an SLO."""

    y: float
    label: str


@dataclass(frozen=True, slots=True)
class Band:
    """A stretch of the x axis: a block, a saturated block."""

    start: float
    end: float
    label: str
    alarm: bool = False


@dataclass(frozen=True, slots=True)
class Chart:
    key: str  # stable id: the HTML element's, the test's handle
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...] = ()
    marks: tuple[Mark, ...] = ()
    rules: tuple[Rule, ...] = ()
    bands: tuple[Band, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    parts: tuple[tuple[str, float], ...]  # (part, value in the axis unit), left to right


@dataclass(frozen=True, slots=True)
class Stacked:
    """Horizontal stacked bars: where the time went."""

    key: str
    title: str
    x_label: str
    bars: tuple[Bar, ...]
    legend: dict[str, str] = field(default_factory=dict)  # part -> what it means


@dataclass(frozen=True, slots=True)
class Figure:
    """One PNG (and one HTML section): charts drawn side by side or stacked."""

    file: str  # the PNG's name in the run directory
    title: str
    charts: tuple[Chart | Stacked, ...]
    columns: int = 1


def cdf(values: Sequence[float], limit: int = MAX_CDF_POINTS) -> tuple[Point, ...]:
    """(value, fraction ≤ value) of sorted values, at most `limit` of them."""
    ordered = sorted(values)
    n = len(ordered)
    if n <= limit:
        ranks: list[int] | range = range(n)
    else:
        ranks = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return tuple((ordered[i], (i + 1) / n) for i in ranks)


def thin(points: Sequence[Point], limit: int = MAX_TIMELINE_POINTS) -> list[int]:
    """Indices kept of points in time order: all up to `limit`, else every k-th and the
    highest 1% by y (the slow requests a timeline is read for)."""
    n = len(points)
    if n <= limit:
        return list(range(n))
    top = sorted(range(n), key=lambda i: points[i][1], reverse=True)[: max(1, n // 100)]
    step = -(-n // (limit - len(top)))
    return sorted(set(range(0, n, step)) | set(top))
