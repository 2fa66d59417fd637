"""report page of a plan (plan.html): the sentence, the ranking and every candidate with
what became of it, the cost–headroom chart, the command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.reports.charts.model import Figure
from loadgen.reports.html.page import Section, markdown, page, pre, verdict
from loadgen.reports.html.run import chart_sections


def render(result: Mapping[str, Any], figures: Sequence[Figure], text: str) -> str:
    """The page from plan.json and plan.md."""
    body = text.split("```", 2)[-1]  # without title and command
    sections = [
        Section("verdict", "Verdict", verdict([result["sentence"]], bad=not result["ranking"])),
        Section("candidates", "Candidates", markdown(body)),
        *chart_sections(figures),
        Section("environment", "Command", pre(result["command"])),
    ]
    return page("loadgen plan", sections)
