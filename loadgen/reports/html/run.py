"""report.html of a run directory (a run, a sweep, a Locust run, a merge, a replay): the
verdict in report.md's words, its figures with their CIs, its sessions, the charts, the
slowest requests, the command and the environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import Any

from loadgen.analysis import slices, steady, timesplit
from loadgen.analysis.records import Record, RunData
from loadgen.reports.charts import svg
from loadgen.reports.charts.model import Figure
from loadgen.reports.formatting import trace_link
from loadgen.reports.html.page import Section, markdown, page, pre, table, verdict


def verdict_lines(
    summary: Mapping[str, Any], meta: Mapping[str, Any], comparison: str | None
) -> tuple[list[str], bool]:
    """What a reader needs first, one line each, in the words report.md and the console use;
    and whether any of it is bad news."""
    lines, bad = [], False
    if summary.get("interrupted"):
        by = meta.get("interrupted_by", "a signal")
        lines.append(f"Interrupted by {by}: partial results, the last block cut short.")
        bad = True
    for name, t in summary["targets"].items():
        saturated = steady.label(t.get("steady_state"))
        if saturated:
            lines.append(f"{name}: {saturated[:1].upper()}{saturated[1:]}")
        if not t["valid"]:
            lines.append(f"{name}: INVALID: {'; '.join(t['invalid_reasons'])}")
        if t["valid"] and not saturated:
            lines.append(f"{name}: valid and steady")
        bad = bad or not t["valid"] or bool(saturated)
        stream = t.get("stream")
        if stream and stream["buffered"]:
            lines.append(f"{name}: stream: {stream['verdict']}")
            bad = True
        worst = slices.sentence(name, t)
        if worst:
            lines.append(worst)
        held = slices.slo_sentence(name, t)
        if held:
            lines.append(held)
            bad = bad or any(s.get("slo_verdict") == slices.FAIL for s in t["slices"])
        lines += [f"{name}: {split.sentence()}" for split in timesplit.splits(t)]
    lines += comparison_verdicts(comparison)
    return lines, bad


def comparison_verdicts(comparison: str | None) -> list[str]:
    """The comparison's SLO lines and its significant differences, as report.md says them."""
    if not comparison:
        return []
    said = [line[2:] for line in comparison.splitlines() if line.startswith("- ")]
    return [
        line
        for line in said
        if " meet" in line or " lower than " in line or " higher than " in line
    ]


# (target, "TTFT" or "E2E", [(request, its figures as report.md writes them)])
Slowest = Sequence[tuple[str, str, Sequence[tuple[Record, Sequence[str]]]]]


def _slowest(template: str | None, slowest: Slowest, columns: Sequence[str]) -> str:
    """report.md's columns and cells, so both tables hold the same figures."""
    parts = []
    for name, label, ranked in slowest:
        rows = []
        for r, cells in ranked:
            trace = escape(r.trace_id) if r.trace_id else "—"
            link = r.trace_id and trace_link(template, r.trace_id)
            if link and r.trace_id:
                trace = f'<a href="{escape(link)}">{escape(r.trace_id)}</a>'
            rows.append((*map(escape, cells), f"<code>{escape(r.request_id)}</code>", trace))
        parts.append(f"<h3>{escape(name)}, by {label}</h3>")
        parts.append(table(columns, rows))
    return "".join(parts)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [kv for k, v in value.items() for kv in _flatten(v, f"{prefix}{k}.")]
    return [(prefix[:-1], str(value))]


def environment(command: str | None, settings: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The command line, then every recorded setting and fact about the run."""
    rows = [(escape(k), escape(v)) for k, v in _flatten({"settings": settings, **meta})]
    return (pre(command) if command else "") + table(("key", "value"), rows)


def chart_sections(figures: Sequence[Figure]) -> list[Section]:
    return [
        Section(
            f"figure-{Path(f.file).stem}", f.title, f'<div class="charts">{svg.figure(f)}</div>'
        )
        for f in figures
    ]


def render(
    data: RunData,
    summary: Mapping[str, Any],
    figures: Sequence[Figure],
    text: Mapping[str, str],
    slowest: tuple[Sequence[str], Slowest],
) -> str:
    """text: report.md's own sections ("figures", and "replay", "sessions", "sweep" and
    "comparison" when there are), so the page reads as report.md does."""
    lines, bad = verdict_lines(summary, data.meta, text.get("comparison"))
    sections = [Section("verdict", "Verdict", verdict(lines, bad))]
    if text.get("replay"):
        sections.append(Section("replay", "Replay", markdown(text["replay"])))
    if text.get("comparison"):
        sections.append(Section("comparison", "Comparison", markdown(text["comparison"])))
    sections.append(Section("figures", "Figures (95% CI)", markdown(text["figures"])))
    if text.get("sessions"):
        sections.append(Section("sessions", "Sessions", markdown(text["sessions"])))
    if text.get("sweep"):
        sections.append(Section("sweep", "Sweep", markdown(text["sweep"])))
    sections += chart_sections(figures)
    columns, ranked = slowest
    if ranked:
        body = _slowest(data.meta.get("trace_url"), ranked, columns)
        sections.append(Section("slowest", "Slowest requests", body))
    meta = {k: v for k, v in data.meta.items() if k != "command"}
    env = environment(data.meta.get("command"), asdict(data.settings), meta)
    sections.append(Section("environment", "Command and environment", env))
    return page(f"loadgen report: {', '.join(summary['targets'])}", sections)
