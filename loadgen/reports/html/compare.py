"""FILE.html beside `compare --out FILE.md`: the verdicts, the comparison in report.md's
words, the series' CDFs with each one's percentiles marked, the runs compared."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from loadgen.reports.charts import run as charts
from loadgen.reports.html.page import Section, bullets, markdown, page, verdict
from loadgen.reports.html.run import chart_sections, comparison_verdicts


def render(series: Sequence, text: str, runs: Sequence[str | Path]) -> str:
    """series: comparison.Series (label, records, summary); text: the comparison's Markdown."""
    lines = comparison_verdicts(text)
    bad = any(" meets " in line and not line.startswith("all") for line in lines)
    figure = charts.latency_cdfs([(s.label, s.records, s.summary["metrics"]) for s in series])
    sections = [
        Section("verdict", "Verdict", verdict(lines or ["no difference is significant"], bad)),
        Section("comparison", "Comparison", markdown(text)),
        *chart_sections([figure]),
        Section("environment", "Runs compared", bullets(str(Path(r)) for r in runs)),
    ]
    return page(f"loadgen comparison: {', '.join(escape(s.label) for s in series)}", sections)
