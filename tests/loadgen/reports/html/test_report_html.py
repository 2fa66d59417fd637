"""report.html without a browser: built from a run directory in today's on-disk format
(tests/loadgen/fixtures/run-v1, a real embedded run), rebuilt by `loadgen report`,
self-contained, its hovers holding the summary's figures, small at 1,000 requests."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace
from html import unescape
from pathlib import Path

import pytest

from loadgen.analysis.records import RunData
from loadgen.analysis.summary import summarize_run
from loadgen.commands.cli import main
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.reports.charts import run as charts
from loadgen.reports.formatting import pct
from loadgen.runs import rundir
from tests.support import RUN_V1
from tests.support.pages import external

TRACE = "http://127.0.0.1:3000/explore?trace={trace_id}"  # the fixture's --trace-url


def page_of(data: RunData) -> str:
    """report.html of a run as report.write makes it (without drawing the PNGs)."""
    summary = summarize_run(data)
    compared = comparison.of_run(data, summary)
    return report.page(data, summary, charts.figures(data, summary), compared)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The fixture rebuilt by `loadgen report` once, and what it printed."""
    out = tmp_path_factory.mktemp("rebuilt") / "run"
    shutil.copytree(RUN_V1, out)
    assert not (out / "report.html").exists()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["report", str(out)]) == 0
    return out, printed.getvalue()


def test_report_rebuilds_an_old_run_directory(rebuilt: tuple[Path, str]) -> None:
    run_dir, printed = rebuilt
    assert f"{run_dir}/: report.md, report.html" in printed
    page = (run_dir / "report.html").read_text()
    for section in ("verdict", "comparison", "figures", "slowest", "environment"):
        assert f'<section id="{section}">' in page
    for png in ("latency_cdf.png", "timeline.png", "pareto.png", "time_split.png"):
        assert (run_dir / png).stat().st_size > 1000
        assert f"![{png}]({png})" in (run_dir / "report.md").read_text()
    rebuilt = json.loads((run_dir / "summary.json").read_text())
    old = json.loads((RUN_V1 / "summary.json").read_text())
    assert rebuilt == json.loads(json.dumps(summarize_run(rundir.read(RUN_V1))))
    for name, t in old["targets"].items():  # the figures the old summary had, alike
        assert rebuilt["targets"][name]["metrics"]["ttft_s"] == t["metrics"]["ttft_s"]
        assert rebuilt["targets"][name]["throughput"] == t["throughput"]


def test_report_says_why_a_directory_is_not_one(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 1
    assert "is not a run directory" in capsys.readouterr().err


def test_the_verdict_comes_first_in_report_mds_words(rebuilt: tuple[Path, str]) -> None:
    run_dir, _ = rebuilt
    page = unescape((run_dir / "report.html").read_text())
    summary = rundir.read_summary(run_dir)
    first = page.index("<section")
    assert page[first:].startswith('<section id="verdict">')
    for name, t in summary["targets"].items():
        for reason in t["invalid_reasons"]:
            assert f"{name}: INVALID: {reason}" in page  # the reason as report.md gives it
            assert reason in (run_dir / "report.md").read_text()
    for line in (run_dir / "report.md").read_text().splitlines():
        if line.startswith("- both meet") or line.startswith("- only"):
            assert line[2:] in page


def test_the_page_references_nothing_outside_itself_but_trace_links(
    rebuilt: tuple[Path, str], run_dir: Path
) -> None:
    page = (rebuilt[0] / "report.html").read_text()
    data = rundir.read(run_dir)
    traces = {TRACE.replace("{trace_id}", r.trace_id) for r in data.records if r.trace_id}
    found = external(page)
    assert found and set(found) <= traces  # the slowest requests' trace links, nothing else
    without = replace(data, meta={k: v for k, v in data.meta.items() if k != "trace_url"})
    assert external(page_of(without)) == []


def test_external_catches_what_a_page_could_fetch() -> None:
    assert external('<img src="a.png"><a href="https://x.org/">x</a>') == [
        "a.png",
        "https://x.org/",
        "//x.org/",
        "img",
    ]
    assert external("<style>@import 'x.css'</style><body>") == ["@import"]
    assert external('<a href="#verdict">v</a><a href="probe-01/report.html">p</a>') == []


def test_a_cdf_hover_holds_the_summarys_percentile(rebuilt: tuple[Path, str]) -> None:
    run_dir, _ = rebuilt
    summary = rundir.read_summary(run_dir)
    page = unescape((run_dir / "report.html").read_text())
    for name, t in summary["targets"].items():
        block = t["metrics"]["ttft_s"]
        tip = f"{name} TTFT P50 {pct(block, 'p50')} ms (n={block['count']})"
        assert f'data-tip="{tip}"' in page
        assert f"{block['p50'] * 1e3:.1f} [" in tip


def test_a_thousand_request_run_makes_a_page_under_a_megabyte(run_dir: Path) -> None:
    data = rundir.read(run_dir)
    span = max(r.end_at for r in data.records) - min(r.intended_at for r in data.records)
    copies = -(-1000 // len(data.records))
    records = []
    for k in range(copies):
        for r in data.records:
            shift = k * span
            records.append(replace(r, request_id=f"{r.request_id}-{k}",
                                   intended_at=r.intended_at + shift, sent_at=r.sent_at + shift,
                                   end_at=r.end_at + shift))  # fmt: skip
    big = replace(data, records=records)
    assert len(records) >= 1000
    assert len(page_of(big).encode()) < 1_000_000


def test_compare_out_writes_a_page_beside_the_markdown(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp.md"
    assert main(["compare", str(RUN_V1), "--out", str(out)]) == 0
    page = out.with_suffix(".html").read_text()
    assert external(page) == []
    page = unescape(page)
    assert '<section id="verdict">' in page and 'id="chart-cdf-ttft"' in page
    for line in out.read_text().splitlines():
        if line.startswith("- ") and " than " in line and "indistinguishable" not in line:
            assert line[2:] in page
