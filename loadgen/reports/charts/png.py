"""Figures drawn with matplotlib: the PNGs beside report.md."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first

from loadgen.reports.charts.model import Chart, Figure, Stacked, color

MARKERS = {"dot": ("o", 36), "ring": ("o", 120), "star": ("*", 220)}


def _chart(ax, chart: Chart) -> None:
    for band in chart.bands:
        ax.axvspan(band.start, band.end, color="red" if band.alarm else "grey",
                   alpha=0.12 if band.alarm else 0.05, lw=0)  # fmt: skip
    named: set[str] = set()
    for s in chart.series:
        if not s.points:
            continue
        xs, ys = zip(*s.points, strict=True)
        style = "--" if s.dashed else "-"
        label = "_nolegend_" if s.name in named else s.name  # a line broken by gaps: once
        named.add(s.name)
        if s.kind == "scatter":
            ax.scatter(xs, ys, s=4, color=color(s.group), label=label)
        else:
            marker = "o" if s.kind == "line" and s.tips else None
            ax.plot(xs, ys, style, marker=marker, ms=4, color=color(s.group), label=label)
    for mark in chart.marks:
        shape, size = MARKERS[mark.kind]
        if mark.kind == "ring":
            ax.scatter([mark.x], [mark.y], s=size, facecolors="none", edgecolors="red")
        else:
            ax.scatter([mark.x], [mark.y], s=size, marker=shape, color=color(mark.group),
                       edgecolors="black", linewidths=0.5, zorder=3)  # fmt: skip
        if mark.kind == "star":
            ax.annotate(mark.tip, (mark.x, mark.y), textcoords="offset points",
                        xytext=(6, 6 + 12 * mark.group), fontsize=8)  # fmt: skip
    for rule in chart.rules:
        ax.axhline(rule.y, color="black", linestyle=":", label=rule.label)
    ax.set_title(chart.title, fontsize=10)
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel(chart.y_label)
    ax.grid(alpha=0.3)
    if chart.series:
        ax.legend(fontsize=7, markerscale=2)


def _stacked(ax, chart: Stacked) -> None:
    parts = list(dict.fromkeys([*chart.legend, *(p for b in chart.bars for p, _ in b.parts)]))
    labelled: set[str] = set()
    for y, bar in enumerate(chart.bars):
        left = 0.0
        for part, value in bar.parts:
            ax.barh(y, value, left=left, color=color(parts.index(part)),
                    label=None if part in labelled else part)  # fmt: skip
            labelled.add(part)
            left += value
    ax.set_yticks(range(len(chart.bars)), [b.label for b in chart.bars])
    ax.invert_yaxis()
    ax.set_title(chart.title, fontsize=10)
    ax.set_xlabel(chart.x_label)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def write(figure: Figure, path: Path) -> None:
    columns = min(figure.columns, len(figure.charts))
    rows = math.ceil(len(figure.charts) / columns)
    bars = sum(len(c.bars) for c in figure.charts if isinstance(c, Stacked))
    height = 0.6 * bars + 1.5 if bars else 3.2 * rows
    fig, axes = plt.subplots(rows, columns, figsize=(max(10, 4.7 * columns), height),
                             squeeze=False)  # fmt: skip
    for ax, chart in zip(axes.flat, figure.charts, strict=False):
        if isinstance(chart, Stacked):
            _stacked(ax, chart)
        else:
            _chart(ax, chart)
    for ax in list(axes.flat)[len(figure.charts) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
