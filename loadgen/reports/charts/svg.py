"""Figures drawn as inline SVG for report.html: every hoverable element carries `data-tip`
(the page's few lines of script show it); no fonts, images or scripts are referenced."""

from __future__ import annotations

import math
from html import escape

from loadgen.reports.charts.model import Chart, Figure, Stacked, color

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 12, 40
STAR = "0,-8 2.4,-2.5 7.6,-2.5 3.5,1 5,6.5 0,3.3 -5,6.5 -3.5,1 -7.6,-2.5 -2.4,-2.5"


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step) + 1)]


def _label(value: float) -> str:
    return f"{value:.6g}"


class _Scale:
    def __init__(self, values: list[float], size: float, flip: bool, zero: bool) -> None:
        values = values or [0.0, 1.0]
        low, high = min(values), max(values)
        if zero:
            low = min(low, 0.0)
        self.ticks = ticks(low, high)
        self.low, self.high = self.ticks[0], self.ticks[-1]
        self.size, self.flip = size, flip

    def __call__(self, value: float) -> float:
        share = (value - self.low) / ((self.high - self.low) or 1.0)
        return self.size * (1 - share) if self.flip else self.size * share


def _attrs(tip: str | None) -> str:
    return f' data-tip="{escape(tip)}"' if tip else ""


def chart(c: Chart) -> str:
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    xs = [x for s in c.series for x, _ in s.points] + [m.x for m in c.marks]
    xs += [v for b in c.bands for v in (b.start, b.end)]
    ys = [y for s in c.series for _, y in s.points] + [m.y for m in c.marks]
    ys += [r.y for r in c.rules]
    x, y = _Scale(xs, w, False, False), _Scale(ys, h, True, True)
    out = [f'<g transform="translate({LEFT},{TOP})">']
    for t in x.ticks:
        out.append(f'<line class="grid" x1="{_n(x(t))}" x2="{_n(x(t))}" y1="0" y2="{h}"/>')
        out.append(f'<text x="{_n(x(t))}" y="{h + 14}" text-anchor="middle">{_label(t)}</text>')
    for t in y.ticks:
        out.append(f'<line class="grid" x1="0" x2="{w}" y1="{_n(y(t))}" y2="{_n(y(t))}"/>')
        out.append(f'<text x="-6" y="{_n(y(t) + 4)}" text-anchor="end">{_label(t)}</text>')
    for b in c.bands:
        cls = "band alarm" if b.alarm else "band"
        out.append(
            f'<rect class="{cls}" x="{_n(x(b.start))}" y="0" width="{_n(x(b.end) - x(b.start))}"'
            f' height="{h}"{_attrs(b.label)}/>'
        )
    for s in c.series:
        stroke = color(s.group)
        pts = " ".join(f"{_n(x(a))},{_n(y(b))}" for a, b in s.points)
        if s.kind != "scatter" and len(s.points) > 1:
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            out.append(f'<polyline points="{pts}" stroke="{stroke}"{dash}/>')
        if s.tips or s.kind == "scatter":
            radius = 2 if s.kind == "scatter" else 3
            out.append(f'<g fill="{stroke}" class="pts">')
            tips = s.tips or ("",) * len(s.points)
            for (px, py), tip in zip(s.points, tips, strict=True):
                out.append(f'<circle cx="{_n(x(px))}" cy="{_n(y(py))}" r="{radius}"{_attrs(tip)}/>')
            out.append("</g>")
    for r in c.rules:
        out.append(f'<line class="rule" x1="0" x2="{w}" y1="{_n(y(r.y))}" y2="{_n(y(r.y))}"/>')
        out.append(
            f'<text x="{w - 4}" y="{_n(y(r.y) - 4)}" text-anchor="end">{escape(r.label)}</text>'
        )
    for m in c.marks:
        at = f"{_n(x(m.x))},{_n(y(m.y))}"
        cls = f' class="mark {m.kind}"'
        if m.kind == "star":
            shape = f'<polygon points="{STAR}" transform="translate({at})" fill="{color(m.group)}"'
        elif m.kind == "ring":
            shape = f'<circle cx="{_n(x(m.x))}" cy="{_n(y(m.y))}" r="8" fill="none"'
        else:
            shape = f'<circle cx="{_n(x(m.x))}" cy="{_n(y(m.y))}" r="5" fill="{color(m.group)}"'
        out.append(f"{shape}{cls}{_attrs(m.tip)}/>")
    out.append(f'<text x="{w / 2}" y="{h + 32}" text-anchor="middle">{escape(c.x_label)}</text>')
    out.append(
        f'<text transform="translate(-50,{h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(c.y_label)}</text></g>"
    )
    legend = list(dict.fromkeys((s.name, color(s.group), s.dashed) for s in c.series))
    return _frame(c.key, c.title, "".join(out), HEIGHT, legend, c.note)


def stacked(c: Stacked) -> str:
    parts = list(dict.fromkeys([*c.legend, *(p for b in c.bars for p, _ in b.parts)]))
    row, left = 28, 130
    h = row * len(c.bars)
    w = WIDTH - left - RIGHT
    x = _Scale([sum(v for _, v in b.parts) for b in c.bars], w, False, True)
    out = [f'<g transform="translate({left},{TOP})">']
    for t in x.ticks:
        out.append(f'<line class="grid" x1="{_n(x(t))}" x2="{_n(x(t))}" y1="0" y2="{h}"/>')
        out.append(f'<text x="{_n(x(t))}" y="{h + 14}" text-anchor="middle">{_label(t)}</text>')
    for i, bar in enumerate(c.bars):
        total = sum(v for _, v in bar.parts) or 1.0
        start = 0.0
        out.append(
            f'<text x="-6" y="{i * row + row / 2 + 4}" text-anchor="end">{escape(bar.label)}</text>'
        )
        for part, value in bar.parts:
            tip = f"{bar.label}: {part} {value:.1f} ms ({value / total:.0%})"
            out.append(
                f'<rect x="{_n(x(start))}" y="{i * row + 4}" width="{_n(x(value) - x(0))}" '
                f'height="{row - 8}" fill="{color(parts.index(part))}"{_attrs(tip)}/>'
            )
            start += value
    out.append(
        f'<text x="{w / 2}" y="{h + 32}" text-anchor="middle">{escape(c.x_label)}</text></g>'
    )
    legend = [
        (f"{p}: {c.legend[p]}" if p in c.legend else p, color(i), False)
        for i, p in enumerate(parts)
    ]
    return _frame(c.key, c.title, "".join(out), h + TOP + BOTTOM, legend, "")


def _frame(key: str, title: str, body: str, height: int, legend: list, note: str) -> str:
    items = "".join(
        f'<span><i style="border-color:{c}"{" class=dashed" if dashed else ""}></i>'
        f"{escape(name)}</span>"
        for name, c, dashed in legend
    )
    note_html = f'<p class="note">{escape(note)}</p>' if note else ""
    return (
        f'<figure class="chart" id="chart-{key}"><figcaption>{escape(title)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">{body}</svg>'
        f'<div class="legend">{items}</div>{note_html}</figure>'
    )


def figure(f: Figure) -> str:
    return "".join(stacked(c) if isinstance(c, Stacked) else chart(c) for c in f.charts)
