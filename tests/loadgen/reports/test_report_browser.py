"""Each kind of report.html in Debian's chromium (headless, the network emulated off) from
real runs against the simulator: a sweep of proxy and direct, a comparison and a capacity
search. No console error, no request but the page itself, every section there, and a
chart's hover shows the figure the summary holds. `--screenshot DIR` keeps what it saw."""

from __future__ import annotations

import json
import platform
from html import unescape
from pathlib import Path

import pytest

from loadgen.analysis import slices
from loadgen.capacity.advice import sentence
from loadgen.commands.cli import main
from loadgen.runs import rundir
from tests.support.browser import CHROMIUM, Browser, Page, open_offline, sections
from tests.support.pages import external

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]
WORKLOAD = ["--input-tokens", "64", "--output-tokens", "8", "--warmup", "0.3s", "--no-progress"]
TRACE = "http://127.0.0.1:3000/explore?trace={trace_id}"
# the sections of each kind of page, in the order a reader meets them
SWEEP_SECTIONS = [
    "verdict",
    "comparison",
    "figures",
    "sweep",
    "figure-latency_cdf",
    "figure-timeline",
    "figure-throughput_latency",
    "figure-pareto",
    "figure-time_split",
    "slowest",
    "environment",
]
COMPARISON_SECTIONS = ["verdict", "comparison", "figure-latency_cdf", "environment"]
CAPACITY_SECTIONS = ["verdict", "probes", "figure-capacity", "figure-pareto", "environment"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """proxy and direct (embedded), two concurrency levels, 4 GPUs, trace links."""
    out = tmp_path_factory.mktemp("sweep") / "run"
    argv = ["--embedded", "--target", "proxy", "--concurrency", "2,8", "--duration", "1.5s"]
    argv += [*WORKLOAD, "--gpus", "4", "--trace-url", TRACE, "--out", str(out)]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def capacity(sim: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("capacity") / "search"
    argv = ["capacity", "--target", sim, "--slo", "ttft=300ms@p90", "--slo", "tpot=50ms@p90"]
    argv += ["--start", "8", "--budget", "20s", *WORKLOAD, "--out", str(out)]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def replayed(sim: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A timed trace replayed in 1 s slices: a calm second, then a burst the server queues."""
    out = tmp_path_factory.mktemp("replay")
    calm = [(i * 200, 100) for i in range(5)]
    burst = [(1000 + i * 50, 1200) for i in range(12)]
    rows = [{"timestamp": t, "input_length": n, "output_length": 4} for t, n in calm + burst]
    trace = out / "burst.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--target", sim, "--replay", str(trace), "--slice", "1s", "--no-progress"]
    assert main([*argv, "--out", str(out / "run")]) == 0
    return out / "run"


def opened(browser: Browser, path: Path, request: pytest.FixtureRequest, name: str) -> Page:
    if name != "run":  # the run's page links its slowest requests' traces (--trace-url)
        assert external(path.read_text()) == []
    keep = request.config.getoption("--screenshot")
    return open_offline(browser, path, Path(keep) / f"{name}.png" if keep else None)


def tips_of(page: Page, chart: str) -> list[str]:
    return page.evaluate(
        f"[...document.querySelectorAll('{chart} [data-tip]')].map(e => e.dataset.tip)"
    )


def test_a_sweeps_page(browser: Browser, sweep: Path, request: pytest.FixtureRequest) -> None:
    page = opened(browser, sweep / "report.html", request, "run")
    assert sections(page) == SWEEP_SECTIONS
    summary = rundir.read_summary(sweep)
    block = summary["targets"]["proxy"]["metrics"]["ttft_s"]
    tip = page.hover('#chart-cdf-ttft .mark[data-tip^="proxy TTFT P50"]')
    assert tip is not None and tip.startswith("proxy TTFT P50 ")
    assert f" {block['p50'] * 1e3:.1f} [" in tip and f"(n={block['count']})" in tip
    top = summary["sweep"]["points"][-1]["targets"]["proxy"]
    per_gpu = top["throughput"]["output_tokens_per_s"] / 4
    tips = tips_of(page, "#chart-pareto")
    assert any(
        t.startswith("proxy at 8: ") and f"{per_gpu:.1f} tok/s per GPU (4 GPUs)" in t for t in tips
    )
    links = page.evaluate("[...document.querySelectorAll('#slowest a')].map(a => a.href)")
    traces = {r.trace_id for r in rundir.read(sweep).records if r.trace_id}
    assert links and all(link.split("trace=")[1] in traces for link in links)
    assert page.hover("#verdict") is None  # no tooltip where there is no value
    env = page.evaluate("document.getElementById('environment').innerText")
    assert "python -m loadgen --embedded" in env and "settings.gpus\t4" in env
    assert f"environment.python\t{platform.python_version()}" in env
    page.send("Emulation.setEmulatedMedia", media="print")  # printable: no navigation,
    hidden = "getComputedStyle(document.querySelector('nav')).display"  # charts whole
    assert page.evaluate(hidden) == "none"
    assert (
        page.evaluate("getComputedStyle(document.querySelector('figure')).breakInside") == "avoid"
    )
    assert len(page.send("Page.printToPDF")["data"]) > 10_000
    page.send("Emulation.setEmulatedMedia", media="")


def test_a_comparisons_page(
    browser: Browser, sweep: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    out = tmp_path / "comparison.md"
    assert main(["compare", str(sweep), "--out", str(out)]) == 0
    page = opened(browser, out.with_suffix(".html"), request, "compare")
    assert sections(page) == COMPARISON_SECTIONS
    said = page.evaluate("document.querySelector('#verdict .verdict').innerText")
    for line in out.read_text().splitlines():
        if "meet" in line and line.startswith("- "):
            assert line[2:] in said


def test_a_capacity_searchs_page(
    browser: Browser, capacity: Path, request: pytest.FixtureRequest
) -> None:
    page = opened(browser, capacity / "report.html", request, "capacity")
    assert sections(page) == CAPACITY_SECTIONS
    result = json.loads((capacity / "capacity.json").read_text())
    ((name, t),) = result["targets"].items()
    said = page.evaluate("document.querySelector('#verdict .verdict').innerText")
    assert said.startswith("At TTFT ≤ 300 ms (P90)")
    if t["capacity"] is not None:
        tip = page.hover("#chart-capacity-ttft .mark.star")
        assert tip == f"{name}: capacity {t['capacity']:g} req/s"
    probe = t["probes"][0]
    tips = tips_of(page, "#chart-capacity-ttft")
    assert any(f"{probe['ttft_s']['p90'] * 1e3:.1f} ms" in tip for tip in tips)
    probe_page = capacity / probe["run_dir"] / "report.html"
    opened(browser, probe_page, request, "capacity-probe")


def test_a_replays_page(browser: Browser, replayed: Path, request: pytest.FixtureRequest) -> None:
    page = opened(browser, replayed / "report.html", request, "replay")
    found = sections(page)
    assert found[:3] == ["verdict", "replay", "figures"] and "figure-slices" in found
    said = page.evaluate("document.querySelector('#verdict .verdict').innerText")
    assert "worst slice " in said  # report.md's sentence
    ((name, t),) = rundir.read_summary(replayed)["targets"].items()
    worst = max(
        (s for s in t["slices"] if s["ttft_s"]["p90"] is not None),
        key=lambda s: s["ttft_s"]["p90"],
    )
    span = slices.span(worst)
    tip = page.hover(f'#chart-slices-ttft [data-tip^="{name} {span}: TTFT P90"]')
    assert (
        tip
        == f"{name} {span}: TTFT P90 {worst['ttft_s']['p90'] * 1e3:.1f} ms ({worst['sent']} sent)"
    )


def test_report_rebuilds_a_capacity_directory_and_its_probes(capacity: Path, capsys) -> None:
    pages = [capacity / "report.html", *capacity.glob("probe-*/report.html")]
    assert len(pages) >= 2
    for page in pages:
        page.unlink()
    assert main(["report", str(capacity)]) == 0
    assert all(page.exists() for page in pages)
    result = json.loads((capacity / "capacity.json").read_text())
    assert sentence(result) in unescape(pages[0].read_text())
    assert len(capsys.readouterr().out.splitlines()) == len(pages)
