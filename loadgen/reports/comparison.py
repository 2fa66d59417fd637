"""Targets side by side: relative differences and plain verdicts, in Markdown (report.md's
comparison section and `python -m loadgen compare`).

Every target of every run is one series; the first is the baseline. Differences of P50, P99
and P99.9 come with bootstrap CIs computed from the raw records of both sides, and a
difference whose CI spans zero is called indistinguishable rather than better or worse.

Only differences beyond a margin of practical equivalence are listed (by default a latency
within 1% or 1 ms, a price or J/token within 1%, an accuracy whose interval lies within 2
points); the rest are counted in one line as the same within the margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from latency_proxy.base.units import parse_duration
from loadgen.analysis import checked, stats, steady
from loadgen.analysis.records import Record, RunData
from loadgen.analysis.slo import LABELS, Slos, check, percentile_label
from loadgen.analysis.summary import figures
from loadgen.reports.formatting import fell_behind, ms, sustained

COMPARED_METRICS = (
    ("ttft_s", "TTFT"),
    ("answer_ttft_s", "answer TTFT"),  # where a series reasoned: TTFT's twin otherwise
    ("tpot_s", "TPOT"),
    ("itl_s", "ITL"),
    ("e2e_s", "E2E"),
)
COMPARED_PERCENTILES = ("p50", "p99", "p999")


@dataclass(frozen=True, slots=True)
class Margin:
    """Differences no one would act on: within `relative` or `absolute_s` for a latency,
    within `relative` for a price or J/token, within `points` for an accuracy."""

    relative: float = 0.01
    absolute_s: float = 0.001
    points: float = 2.0

    @classmethod
    def parse(cls, text: str) -> Margin:
        """`1%,1ms,2pt`: any of the three, in any order; the others keep their defaults."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if part.endswith("%"):
                values["relative"] = float(part[:-1]) / 100
            elif part.endswith("pt"):
                values["points"] = float(part[:-2])
            else:
                values["absolute_s"] = parse_duration(part)
        margin = cls(**values)
        if not all(0 <= v < 1e6 for v in (margin.relative, margin.absolute_s, margin.points)):
            raise ValueError(f"--margin {text}: each part must be a finite value ≥ 0")
        return margin

    def __str__(self) -> str:
        return (
            f"±{self.relative * 100:g}% or ±{self.absolute_s * 1e3:g} ms, "
            f"±{self.points:g} points of accuracy"
        )

    def beyond(self, base: float | None, diff: stats.RelativeDifference) -> bool:
        """Whether a percentile's difference exceeds both the relative and absolute margin."""
        if diff.estimate is None or base is None:
            return False
        return abs(diff.estimate) > self.relative and abs(diff.estimate * base) > self.absolute_s


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    records: list[Record]  # measured and successful only
    summary: dict[str, Any]  # targets.<name> of its summary.json
    slo: Slos  # the SLOs its run was judged against

    def values(self, metric: str) -> list[float]:
        return [v for r in self.records for v in figures(r, metric)]


def series_of(data: RunData, summary: dict[str, Any], prefix: str = "") -> list[Series]:
    return [
        Series(
            prefix + name,
            [r for r in data.records if r.target == name and r.ok and not r.excluded],
            target,
            data.settings.slos,
        )
        for name, target in summary["targets"].items()
    ]


def of_run(data: RunData, summary: dict[str, Any]) -> str | None:
    """The comparison section of a run's own report, when it measured several targets."""
    series = series_of(data, summary)
    if len(series) < 2:
        return None
    rng = np.random.default_rng(data.settings.seed)
    return render(series, data.settings.slos, judged_percentile(series), rng, level=2)


def proxy_cost(
    data: RunData, summary: dict[str, Any], margin: Margin = Margin()
) -> dict[str, Any] | None:
    """summary.json's `proxy_cost`: what the proxy adds to TTFT P50 against direct, with its
    95% CI and whether it is beyond the margin; None unless the run measured both. It is
    the question such a run asks, so the console and the report answer it first."""
    by_label = {s.label: s for s in series_of(data, summary)}
    if "proxy" not in by_label or "direct" not in by_label:
        return None
    direct, proxy = by_label["direct"], by_label["proxy"]
    rng = np.random.default_rng(data.settings.seed)
    p = stats.PERCENTILES["p50"]
    found = stats.difference(direct.values("ttft_s"), proxy.values("ttft_s"), p, rng)
    base = direct.summary["metrics"]["ttft_s"]["p50"]
    if found is None or not base:
        return None
    added, low, high = found
    relative = stats.RelativeDifference(added / base, low / base, high / base)
    beyond = margin.beyond(base, relative)
    said = "beyond the margin" if beyond else "the same within the margin"
    return {
        "metric": "ttft_s",
        "percentile": "p50",
        "added_s": added,
        "interval_s": [low, high],
        "beyond_margin": beyond,
        "sentence": (
            f"the proxy adds {added * 1e3:.2f} ms to TTFT P50 (95% CI {low * 1e3:.2f} to "
            f"{high * 1e3:.2f} ms), {said} (±{margin.relative * 100:g}% or "
            f"±{margin.absolute_s * 1e3:g} ms)"
        ),
    }


def judged_percentile(series: Sequence[Series]) -> str:
    """The percentile SLOs are judged at: P99, or the highest every series can support."""
    supported = [
        pct
        for pct in ("p50", "p90", "p99")
        if all(s.summary["metrics"]["ttft_s"][pct] is not None for s in series)
    ]
    return supported[-1] if supported else "p99"


def sentence(
    base: str, other: str, label: str, pct: str, diff: stats.RelativeDifference
) -> str | None:
    if diff.estimate is None or diff.low is None or diff.high is None:
        return None
    name = f"{label} {pct.upper().replace('P999', 'P99.9')}"
    ci = f"CI {diff.low * 100:+.2f}% to {diff.high * 100:+.2f}%"
    if not diff.significant:
        return (
            f"{other}'s {name} is indistinguishable from {base}'s "
            f"({diff.estimate * 100:+.2f}%, {ci})"
        )
    direction = "lower" if diff.estimate < 0 else "higher"
    return f"{other}'s {name} is {abs(diff.estimate) * 100:.2f}% {direction} than {base}'s ({ci})"


def slo_verdicts(series: Sequence[Series], slos: Slos, default_pct: str) -> list[str]:
    """Who meets each SLO at its percentile (default_pct where it names none), in words."""
    lines = []
    judged = [(s, check(slos, s.summary["metrics"], default_pct)) for s in series]
    for i, (key, limit) in enumerate(slos.limits.items()):
        meeting, unknown = [], []
        for s, checks in judged:
            held = checks[i].held
            if held is None:
                unknown.append(s.label)
            elif held:
                meeting.append(s.label)
        pct = slos.percentile(key, default_pct)
        what = f"{LABELS[key]} ≤ {limit * 1e3:g} ms at {percentile_label(pct)}"
        if len(unknown) == len(series):
            lines.append(f"{what}: too few samples to tell")
            continue
        if len(meeting) == len(series):
            who = "both meet" if len(series) == 2 else "all meet"
        elif not meeting:
            who = "none meets"
        elif len(meeting) == 1:
            who = f"only {meeting[0]} meets"
        else:
            who = f"{', '.join(meeting)} meet"
        line = f"{who} {what}"
        if unknown:
            line += f" ({', '.join(unknown)}: too few samples to tell)"
        lines.append(line)
    return lines


def render(
    series: Sequence[Series],
    slos: Slos,
    slo_pct: str,
    rng: np.random.Generator,
    level: int = 1,
    margin: Margin = Margin(),
) -> str:
    """Markdown: values side by side, differences against the first series, SLO verdicts."""
    title, sub = "#" * level, "#" * (level + 1)
    header = "| metric | " + " | ".join(s.label for s in series) + " |"
    lines = [f"{title} loadgen comparison", "", header, "|---" * (len(series) + 1) + "|"]
    reasoned = any(r.reasoning_s is not None for s in series for r in s.records)
    compared = [
        (metric, label)
        for metric, label in COMPARED_METRICS
        if metric == "ttft_s"
        or (
            (reasoned or metric != "answer_ttft_s")
            and all((s.summary["metrics"].get(metric) or {}).get("count") for s in series)
        )
    ]
    for metric, label in compared:
        for pct in COMPARED_PERCENTILES:
            cells = []
            for s in series:
                m = s.summary["metrics"][metric]
                cells.append(f"{ms(m[pct])} (n={m['count']})")
            name = f"{label} {pct.upper().replace('P999', 'P99.9')} (ms)"
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for s in series:
        t = s.summary["throughput"]
        valid = (
            "valid" if s.summary["valid"] else "INVALID: " + "; ".join(s.summary["invalid_reasons"])
        )
        state = steady.label(s.summary.get("steady_state"))
        lines.append(
            f"- {s.label}: {sustained(s.summary) or 0:.2f} req/s, "
            f"{t['output_tokens_per_s'] or 0:.1f} output tok/s; "
            + (f"{state}; " if state else "")
            + valid
        )
    base = series[0]
    if saturated := [s for s in series if fell_behind(s.summary)]:
        lines[2:2] = [*_saturation_lead(series, saturated), ""]
    lines += ["", f"{sub} Differences against {base.label}", ""]
    for other in series[1:]:
        lines += differences(base, other, compared, rng, margin)
    signals = signal_verdicts(series)
    if signals:
        lines += ["", f"{sub} Server signals", ""] + [f"- {v}" for v in signals]
    lines += ["", f"{sub} SLOs", ""] + [f"- {v}" for v in slo_verdicts(series, slos, slo_pct)]
    return "\n".join(lines) + "\n"


def _saturation_lead(series: Sequence[Series], saturated: Sequence[Series]) -> list[str]:
    """What leads a comparison where a run fell behind its load: each one's saturation and
    the rate it completed (its capacity at most), and, when all did, those rates compared."""
    lines = []
    for s in saturated:
        state = s.summary["steady_state"]
        lines.append(
            f"- {s.label} saturated: it completed {state['completion_per_s']:.1f} req/s against "
            f"{state['arrival_per_s']:.1f} arriving, so its capacity is at most that"
        )
    if len(saturated) == len(series) > 1:
        base, rate = series[0], series[0].summary["steady_state"]["completion_per_s"]
        for other in series[1:]:
            theirs = other.summary["steady_state"]["completion_per_s"]
            if rate:
                change = theirs / rate - 1
                word = "higher" if change > 0 else "lower"
                size = f"is {abs(change) * 100:.0f}% {word} than" if round(change, 2) else "equals"
                lines.append(
                    f"- {other.label}'s completed rate {size} {base.label}'s ({theirs:.1f} "
                    f"against {rate:.1f} req/s)"
                )
    return lines


def differences(
    base: Series,
    other: Series,
    compared: Sequence[tuple[str, str]],
    rng: np.random.Generator,
    margin: Margin,
) -> list[str]:
    """The bullets of one series against the baseline: each difference beyond the margin,
    then one line for all those within it."""
    said, same = [], 0
    behind = [s.label for s in (base, other) if fell_behind(s.summary)]
    for metric, label in [] if behind else compared:
        a, b = base.values(metric), other.values(metric)
        for pct in COMPARED_PERCENTILES:
            diff = stats.relative_difference(a, b, stats.PERCENTILES[pct], rng)
            text = sentence(base.label, other.label, label, pct, diff)
            if text is None:
                continue
            if margin.beyond(base.summary["metrics"][metric][pct], diff):
                said.append(text)
            else:
                same += 1
    more, within = checked.differences(
        base.label, other.label, base.summary, other.summary, margin.relative, margin.points
    )
    said += more
    same += within
    lines = [f"- {text}" for text in said]
    if behind:
        lines.insert(
            0,
            f"- latency percentiles are not compared: {' and '.join(behind)} fell behind "
            f"{'their' if len(behind) > 1 else 'its'} load, and a saturated run's percentiles "
            "grow with its length",
        )
    if same:
        counted = f"{same} figures are" if same > 1 else "1 figure is"
        if said:
            counted = "the other " + ("figure is" if same == 1 else counted)
        lines.append(
            f"- {other.label}: {counted} the same as {base.label}'s within the margin ({margin})"
        )
    return lines


SIGNAL_FIGURES = (
    ("reasoning", "share", "reasoning share of output tokens"),
    ("cache", "hit_fraction", "cache-hit fraction of prompt tokens"),
)


def signal_verdicts(series: Sequence[Series]) -> list[str]:
    """Reasoning share, cache-hit fraction and stalls against the first series, in words
    (only figures both sides carry)."""
    base = series[0]
    lines: list[str] = []
    figures_of: list[dict[str, Any]] = [s.summary.get("signals") or {} for s in series]
    if not all(figures_of):
        return lines
    for other, theirs in zip(series[1:], figures_of[1:], strict=True):
        ours = figures_of[0]
        for block, key, name in SIGNAL_FIGURES:
            a, b = ours[block][key], theirs[block][key]
            if a is None or b is None:
                continue
            word = "equal to" if abs(b - a) < 0.005 else ("higher than" if b > a else "lower than")
            lines.append(
                f"{other.label}'s {name} ({b * 100:.1f}%) is {word} {base.label}'s ({a * 100:.1f}%)"
            )
        a_stalls, b_stalls = ours["stalls"], theirs["stalls"]
        if a_stalls["streams"] and b_stalls["streams"]:
            rate_a = a_stalls["stalls"] / a_stalls["streams"] * 100
            rate_b = b_stalls["stalls"] / b_stalls["streams"] * 100
            word = (
                "as often as"
                if rate_a == rate_b
                else ("more often than" if rate_b > rate_a else "less often than")
            )
            lines.append(
                f"{other.label} stalls {rate_b:.1f} times per 100 streams, {word} "
                f"{base.label} ({rate_a:.1f})"
            )
    return lines
