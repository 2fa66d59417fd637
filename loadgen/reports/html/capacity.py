"""report.html of a capacity search: the closing sentence (what holds, what breaks first
above it), the table and every probe (linked to its own report.html), the charts, the
command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.reports.charts.model import Figure
from loadgen.reports.html.page import Section, markdown, page, pre, verdict
from loadgen.reports.html.run import chart_sections


def render(
    result: Mapping[str, Any], figures: Sequence[Figure], conclusion: Sequence[str], text: str
) -> str:
    """The page from capacity.json, report.md's closing lines and report.md itself."""
    found = any(t["capacity"] is not None for t in result["targets"].values())
    text = text.replace("/report.md)", "/report.html)")
    body = text.split("## Conclusion")[0].split("```", 2)[-1]  # without title and command
    sections = [
        Section("verdict", "Verdict", verdict(conclusion, bad=not found)),
        Section("probes", "Search and probes", markdown(body)),
        *chart_sections(figures),
        Section("environment", "Command", pre(result["command"])),
    ]
    return page(f"loadgen capacity: {', '.join(result['targets'])}", sections)
