"""Server signals in loadgen's summary, report and compare (reasoning, cache, stalls, the
per-request TTFT split)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis import timesplit
from loadgen.analysis.records import Record, RunData, SummarySettings
from loadgen.analysis.slo import Slos
from loadgen.analysis.summary import summarize
from loadgen.commands import compare
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.reports.slowest import ttft_split
from loadgen.runs import rundir
from tests.loadgen.analysis.test_summary import T0, phases, records


def with_signals(recs: list[Record], cached: int, stall_every: int) -> list[Record]:
    """The records as a reasoning server with a prefix cache answered them."""
    out = []
    for i, r in enumerate(recs):
        stalled = stall_every and i % stall_every == 0
        out.append(
            dataclasses.replace(
                r,
                answer_ttft_s=r.ttft_s + 0.5,
                reasoning_s=0.5,
                reasoning_tokens=16,
                reasoning_source="server",
                cached_tokens=cached,
                server_queue_s=r.ttft_s * 0.6,
                server_ttft_s=r.ttft_s * 0.3,
                max_itl_s=2.0 if stalled else 0.02,
                stalls=1 if stalled else 0,
            )
        )
    return out


def run_dir(path: Path, recs: list[Record], target: str) -> Path:
    data = RunData(records=recs, phases=phases(target), loop_lag=[(T0 + 1, 0.001)])
    summary = summarize(data.records, data.phases, data.loop_lag, data.gpu, data.settings)
    return rundir.write(path, data, summary)


def test_the_summary_carries_reasoning_share_cache_hits_and_stalls() -> None:
    recs = with_signals(records("a", 200, 0.3, 1), cached=256, stall_every=10)
    t = summarize(recs, phases("a"), [], [], SummarySettings())["targets"]["a"]
    signals = t["signals"]
    assert signals["reasoning"]["share"] == 16 / 64 and signals["reasoning"]["requests"] == 200
    assert signals["cache"]["hit_fraction"] == 256 / 512
    assert signals["cache"]["requests_with_hits"] == 200
    assert signals["stalls"] == {
        "streams": 200,
        "stalls": 20,
        "streams_with_stalls": 20,
        "max_itl_s": signals["stalls"]["max_itl_s"],
    }
    assert t["metrics"]["answer_ttft_s"]["count"] == 200
    assert t["metrics"]["server_queue_s"]["p50"] is not None


def test_without_server_signals_the_blocks_say_nothing() -> None:
    t = summarize(records("a", 50, 0.3, 2), phases("a"), [], [], SummarySettings())["targets"]["a"]
    assert t["signals"]["reasoning"]["share"] is None
    assert t["signals"]["cache"]["hit_fraction"] is None
    assert t["signals"]["stalls"]["streams"] == 0
    assert report.signal_lines(t["signals"]) == []


def test_the_report_shows_the_signals_and_splits_the_slowest_ttfts(tmp_path: Path) -> None:
    recs = with_signals(records("a", 120, 0.3, 3), cached=128, stall_every=4)
    data = RunData(records=recs, phases=phases("a"))
    summary = summarize(recs, data.phases, [], [], SummarySettings())
    text = report.write(tmp_path, data, summary).read_text()
    assert "- reasoning: 25.0% of output tokens over 120 requests" in text
    assert "- prefix cache: 25.0% of prompt tokens cached; 120 of 120 requests hit" in text
    assert "- stalls: 30 in 30 of 120 streams" in text
    assert "| answer TTFT |" in text  # the metrics table's row
    slowest = max(recs, key=lambda r: r.ttft_s)
    queue, server, rest = ttft_split(slowest)
    assert queue + server + rest == slowest.ttft_s and rest > 0
    row = next(line for line in text.splitlines() if slowest.request_id in line)
    assert f"| {report.ms(queue)} | {report.ms(server)} | {report.ms(rest)} |" in row


def test_compare_judges_the_signals(tmp_path: Path) -> None:
    run_dir(tmp_path / "A", with_signals(records("a", 400, 0.3, 4), 0, 0), "a")
    run_dir(tmp_path / "B", with_signals(records("b", 400, 0.3, 5), 384, 8), "b")
    series = compare.load_series([tmp_path / "A", tmp_path / "B"])
    text = comparison.render(series, Slos({"ttft": 1.0}), "p50", np.random.default_rng(0))
    assert "answer TTFT P50 (ms)" in text
    assert "b's cache-hit fraction of prompt tokens (75.0%) is higher than a's (0.0%)" in text
    assert "b's reasoning share of output tokens (25.0%) is equal to a's (25.0%)" in text
    assert "b stalls 12.5 times per 100 streams, more often than a (0.0)" in text


def test_compare_reads_summaries_from_before_the_signals(tmp_path: Path) -> None:
    for name in ("a", "b"):
        run_dir(tmp_path / name.upper(), records(name, 100, 0.3, 6), name)
    series = compare.load_series([tmp_path / "A", tmp_path / "B"])
    for s in series:  # as a summary.json written before these figures existed
        del s.summary["signals"], s.summary["metrics"]["answer_ttft_s"]
    text = comparison.render(series, Slos({"ttft": 1.0}), "p50", np.random.default_rng(0))
    assert "answer TTFT" not in text and "Server signals" not in text


def test_where_the_time_went_from_the_per_request_timings(tmp_path: Path) -> None:
    recs = [
        dataclasses.replace(r, server_decode_s=0.02 * 63)
        for r in with_signals(records("a", 200, 0.3, 7), cached=0, stall_every=0)
    ]
    t = summarize(recs, phases("a"), [], [], SummarySettings())["targets"]["a"]
    assert not t["server"]  # no --server-metrics
    [ttft, e2e] = timesplit.splits(t)
    parts = dict(ttft.parts)
    assert parts["queue"] == pytest.approx(0.6 * ttft.client_s)
    assert parts["prefill"] == pytest.approx(0.3 * ttft.client_s)
    assert parts["rest"] == pytest.approx(0.1 * ttft.client_s)
    assert dict(e2e.parts)["decode"] == pytest.approx(0.02 * 63)
    text = "\n".join(timesplit.markdown("a", t))
    assert "60% of mean TTFT is vLLM's queue" in text and "per-request timings" in text
