"""summary.json from records (contract keys, validity, goodput); merge, compare, GPU, report."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.records import UNFINISHED, GpuSample, Phase, Record, RunData, SummarySettings
from loadgen.analysis.slo import Slos, parse_slos
from loadgen.analysis.stats import union_seconds
from loadgen.analysis.summary import summarize
from loadgen.commands import compare
from loadgen.engine.progress import Progress
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.runs import rundir
from loadgen.shards import merge
from loadgen.stack import gpu_metrics

T0 = 1_800_000_000.0


def records(target: str, n: int, ttft: float, seed: int, shard: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        at = T0 + i * 0.01
        first = ttft * rng.lognormal(0, 0.2)
        out.append(
            Record(
                request_id=f"{target}-{seed}-{i}",
                target=target,
                intended_at=at,
                sent_at=at + 1e-4,
                end_at=at + 1,
                send_lag_s=1e-4,
                ok=True,
                status=200,
                shard=shard,
                level=8,
                ttft_s=first,
                tpot_s=0.02,
                e2e_s=first + 0.02 * 63,
                itl_s=[0.02] * 63,
                ttfnt_s={"3": first + 0.04},
                input_tokens=512,
                output_tokens=64,
            )
        )
    return out


def blank(request_id: str, target: str) -> dict[str, object]:
    """The fields every record has, for a request that measured nothing at T0."""
    return dict(
        request_id=request_id, target=target, intended_at=T0, sent_at=T0, end_at=T0, send_lag_s=0.0
    )


def phases(target: str, start: float = T0, end: float = T0 + 10) -> list[Phase]:
    return [Phase(target=target, block=0, start_at=start, end_at=end, level=8)]


def test_summary_contract_keys() -> None:
    recs = records("proxy", 1200, 0.3, 1)
    recs.append(Record(**blank("w", "proxy"), ok=True, excluded="warmup", ttft_s=9.0))
    recs.append(Record(**blank("f", "proxy"), ok=False, status=500, error="http_500"))
    recs.append(Record(**blank("u", "proxy"), ok=False, error=UNFINISHED))  # the drain ended it
    summary = summarize(recs, phases("proxy"), [(T0 + 1, 0.001)], [], SummarySettings())
    t = summary["targets"]["proxy"]
    for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for key in ("p50", "p90", "p99", "p999", "mean", "count"):
            assert key in t["metrics"][metric]
        low, high = t["metrics"][metric]["ci95"]["p50"]
        assert low <= t["metrics"][metric]["p50"] <= high
        assert "p99" in t["metrics"][metric]["ci95"]
    assert t["metrics"]["ttft_s"]["count"] == 1200  # warmup and failure excluded
    assert t["metrics"]["itl_s"]["count"] == 1200 * 63
    assert t["requests"] == {
        "ok": 1200,
        "failed": 1,
        "unfinished": 1,
        "excluded": {"warmup": 1},
        "errors": {"http_500": 1},
        "tpot_not_measured": 0,
    }
    assert t["throughput"]["requests_per_s"] == pytest.approx(120.0)
    assert t["throughput"]["output_tokens_per_s"] == pytest.approx(120.0 * 64)
    assert set(t["goodput"]) >= {"requests_per_s", "fraction"}
    assert t["valid"] is True and t["invalid_reasons"] == []
    assert t["compat"]["vllm_bench"]["tpot_s"]["p50"] == pytest.approx(
        (t["metrics"]["e2e_s"]["p50"] - t["metrics"]["ttft_s"]["p50"]) / 63, rel=0.05
    )
    json.dumps(summary)  # serialisable as is


def test_small_samples_do_not_claim_tail_percentiles() -> None:
    t = summarize(records("a", 150, 0.3, 2), phases("a"), [], [], SummarySettings())["targets"]["a"]
    ttft = t["metrics"]["ttft_s"]
    assert ttft["p99"] is not None and ttft["p999"] is None and ttft["ci95"]["p999"] is None


def test_goodput_against_slos() -> None:
    recs = records("a", 100, 0.3, 3)
    for r in recs[:25]:
        r.ttft_s = 1.0
    for r in recs[25:35]:
        r.tpot_s = 0.06
    t = summarize(recs, phases("a"), [], [], SummarySettings())["targets"]["a"]
    assert t["goodput"]["fraction"] == pytest.approx(0.65)
    assert t["goodput"]["requests_per_s"] == pytest.approx(6.5)
    loose = SummarySettings(slo=parse_slos(["ttft=2s", "tpot=100ms"]).limits)
    assert summarize(recs, phases("a"), [], [], loose)["targets"]["a"]["goodput"]["fraction"] == 1


def test_parse_slos() -> None:
    assert parse_slos([]) == Slos({"ttft": 0.8, "tpot": 0.05})
    # given any, exactly those are judged: no default TTFT beside them
    assert parse_slos(["tpot=45ms", "e2e=10s"]).limits == {"tpot": 0.045, "e2e": 10.0}
    slos = parse_slos(["ttft=800ms@p90", "tpot=50ms@P99.9"])
    assert slos.percentiles == {"ttft": "p90", "tpot": "p999"}
    assert slos.describe() == "TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P99.9)"
    assert parse_slos(["ttft=1s"]).percentile("ttft") == "p99"  # the default percentile
    for bad in ("itl=5ms", "ttft=800ms@p95", "ttft=800ms@"):
        with pytest.raises(ValueError):
            parse_slos([bad])


def test_client_bottleneck_marks_the_target_invalid() -> None:
    recs = records("a", 200, 0.3, 4)
    for r in recs[:10]:
        r.send_lag_s = 0.2
    lag = [(T0 + i * 0.02, 0.05 if i % 10 == 0 else 0.0) for i in range(400)]
    t = summarize(recs, phases("a"), lag, [], SummarySettings())["targets"]["a"]
    assert t["valid"] is False
    assert any("send lag" in r for r in t["invalid_reasons"])
    assert any("event-loop lag" in r for r in t["invalid_reasons"])
    none_ok = [Record(**blank("x", "b"), ok=False, error="timeout")]
    t = summarize(none_ok, phases("b"), [], [], SummarySettings())["targets"]["b"]
    assert t["invalid_reasons"] == ["no successful requests"]


def test_a_client_starved_of_cpu_by_others_is_told_from_one_busy_itself() -> None:
    """Late sends from a client that used a tenth of a core: the machine's other processes
    took its CPU, and the reason says so instead of calling the client the bottleneck."""
    recs = records("a", 200, 0.3, 4)
    for r in recs[:10]:
        r.send_lag_s = 0.2
    lag = [(T0 + i * 0.02, 0.05 if i % 10 == 0 else 0.0) for i in range(400)]
    for cpu, said in ((0.1, "other processes on its machine"), (0.95, "was the bottleneck")):
        ph = [replace(phases("a")[0], client_cpu=cpu)]
        t = summarize(recs, ph, lag, [], SummarySettings())["targets"]["a"]
        assert not t["valid"] and t["client"]["cpu"] == cpu
        send, loop = t["invalid_reasons"]
        assert said in send
        assert ("used 10% of a core" in loop) == (cpu == 0.1)


def test_active_time_is_a_union() -> None:
    assert union_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_seconds([]) == 0


def test_mbu_and_gpu_summaries() -> None:
    recs = records("a", 100, 0.3, 5)
    gpu = [
        GpuSample(at=T0 + i, source="sim", gpu=g, memory_mib=1000.0 + i, power_w=300.0)
        for i in range(5)
        for g in ("0", "1")
    ]
    gpu.append(
        GpuSample(at=T0 + 100, source="sim", gpu="0", memory_mib=99999.0, power_w=1.0)
    )  # outside the run: ignored
    settings = SummarySettings(weight_bytes=40e9, gpu_bandwidth_bytes_s=2e12, gpus=1)
    t = summarize(recs, phases("a"), [], gpu, settings)["targets"]["a"]
    assert t["mbu"] == pytest.approx(40e9 / 0.02 / 2e12)
    assert t["gpu"]["peak_memory_mib"] == 1004.0
    assert t["gpu"]["mean_power_w_total"] == pytest.approx(600.0)


def test_gpu_metrics_parse() -> None:
    text = (
        "# HELP DCGM_FI_DEV_FB_USED fb\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="x"} 40960\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="y"} 40000\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 312.5\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 99\n'
    )
    samples = gpu_metrics.parse(text, "u", 5.0)
    assert samples == [
        GpuSample(at=5.0, source="u", gpu="0", memory_mib=40960.0, power_w=312.5),
        GpuSample(at=5.0, source="u", gpu="1", memory_mib=40000.0, power_w=None),
    ]


def test_sweep_summary_has_one_point_per_level() -> None:
    low = records("a", 100, 0.3, 6)
    high = records("a", 100, 0.6, 7)
    for r in high:
        r.level = 32
    ph = [
        Phase(target="a", block=0, start_at=T0, end_at=T0 + 10, level=8),
        Phase(target="a", block=0, start_at=T0 + 10, end_at=T0 + 20, level=32),
    ]
    s = summarize(low + high, ph, [], [], SummarySettings(), sweep="concurrency")
    assert [p["level"] for p in s["sweep"]["points"]] == [8, 32]
    assert s["targets"] == s["sweep"]["points"][-1]["targets"]
    assert s["targets"]["a"]["metrics"]["ttft_s"]["p50"] > 0.45


def test_an_interrupted_level_is_marked_and_earlier_levels_stay_valid() -> None:
    low = records("a", 100, 0.3, 6)
    high = records("a", 20, 0.6, 7)
    for r in high:
        r.level = 32
    cut = Phase(
        target="a",
        block=0,
        start_at=T0 + 10,
        end_at=T0 + 12,
        level=32,
        done_at=T0 + 12,
        interrupted=True,
    )
    s = summarize(
        low + high,
        [Phase(target="a", block=0, start_at=T0, end_at=T0 + 10, level=8), cut],
        [],
        [],
        SummarySettings(),
        "rate",
    )
    first, last = s["sweep"]["points"]
    assert s["interrupted"] is True
    assert first["targets"]["a"]["valid"] is True
    assert last["targets"]["a"]["valid"] is False
    (reason,) = last["targets"]["a"]["invalid_reasons"]
    assert reason.startswith("interrupted at ") and "block a#0" in reason
    assert last["targets"]["a"]["throughput"]["active_s"] == 2  # up to the interruption
    assert summarize(low, phases("a"), [], [], SummarySettings())["interrupted"] is False


def _run_dir(path: Path, recs: list[Record], ph: list[Phase], shard: int) -> Path:
    data = RunData(records=recs, phases=ph, loop_lag=[(T0 + 1, 0.001)], meta={"shard": [shard, 2]})
    summary = summarize(data.records, data.phases, data.loop_lag, data.gpu, data.settings)
    return rundir.write(path, data, summary)


def test_merge_is_exact(tmp_path: Path) -> None:
    a = records("a", 700, 0.3, 8, shard=0)
    b = records("a", 500, 0.5, 9, shard=1)
    whole = summarize(a + b, phases("a"), [(T0 + 1, 0.001)] * 2, [], SummarySettings())
    _run_dir(tmp_path / "s0", a, phases("a"), 0)
    _run_dir(tmp_path / "s1", b, phases("a", T0 + 1, T0 + 10), 1)
    _, merged = merge.merge_dirs([tmp_path / "s0", tmp_path / "s1"], tmp_path / "m")
    assert merged["targets"]["a"]["metrics"] == whole["targets"]["a"]["metrics"]
    assert merged["targets"]["a"]["requests"]["ok"] == 1200
    assert merged["targets"]["a"]["throughput"]["active_s"] == 10
    on_disk = rundir.read_summary(tmp_path / "m")
    assert on_disk["targets"]["a"]["metrics"]["ttft_s"]["p999"] is not None
    assert (tmp_path / "m" / "report.md").exists()
    assert len(rundir.read(tmp_path / "m").records) == 1200


def test_compare_differences_and_verdicts(tmp_path: Path) -> None:
    _run_dir(tmp_path / "A", records("a", 800, 0.40, 10), phases("a"), 0)
    _run_dir(tmp_path / "B", records("b", 800, 0.30, 11), phases("b"), 0)
    series = compare.load_series([tmp_path / "A", tmp_path / "B"])
    assert [s.label for s in series] == ["a", "b"]
    slos = Slos({"ttft": 0.35, "tpot": 0.05})
    text = comparison.render(series, slos, "p50", np.random.default_rng(0))
    assert "b's TTFT P50 is 2" in text and "% lower than a's (CI" in text  # ≈ 25% lower
    assert "b's TPOT P50" not in text  # within the margin: counted, not listed
    assert "b: the other 5 figures are the same as a's within the margin" in text
    assert "only b meets TTFT ≤ 350 ms at P50" in text
    assert "both meet TPOT ≤ 50 ms at P50" in text
    assert "| TTFT P99.9 (ms) | — (n=800) | — (n=800) |" in text
    at_p90 = Slos({"ttft": 0.35, "tpot": 0.05}, {"tpot": "p90"})  # tpot=50ms@p90
    verdicts = comparison.slo_verdicts(series, at_p90, "p50")
    assert verdicts == ["only b meets TTFT ≤ 350 ms at P50", "both meet TPOT ≤ 50 ms at P90"]


def test_report_markdown_and_console(tmp_path: Path) -> None:
    recs = records("a", 120, 0.3, 12)
    data = RunData(records=recs, phases=phases("a"), meta={"command": "python -m loadgen x"})
    summary = summarize(recs, data.phases, [], [], SummarySettings())
    path = report.write(tmp_path, data, summary)
    text = path.read_text()
    assert "python -m loadgen x" in text and "n/a (needs ≥1000)" in text
    assert (tmp_path / "latency_cdf.png").stat().st_size > 1000
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    table = report.console_table(summary)
    assert table.splitlines()[0].split()[:3] == ["target", "ok", "failed"]
    assert "120" in table.splitlines()[2]


def test_progress_line_shows_running_percentiles_and_errors() -> None:
    stream = io.StringIO()
    progress = Progress(stream, label="run")
    for r in records("a", 100, 0.3, 13):
        progress(r)
    progress(Record(**blank("f", "a"), ok=False, error="timeout"))
    line = progress.line()
    assert "100 ok" in line and "1 errors" in line
    assert "TTFT P50 30" in line and "P99 " in line

    async def draw_briefly() -> None:
        task = asyncio.create_task(progress.draw(0.01))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(draw_briefly())
    assert stream.getvalue().count("\r") >= 2 and stream.getvalue().endswith("\n")


def test_requests_without_a_tpot_are_counted_and_said_in_the_report() -> None:
    """Answered in one content event (a buffering server) or one token: no TPOT, so not in
    its percentiles, and the report says how many."""
    recs = records("a", 20, 0.3, 3)
    for r in recs[:5]:
        r.tpot_s, r.itl_s = None, []
    t = summarize(recs, phases("a"), [], [], SummarySettings())["targets"]["a"]
    assert t["requests"]["tpot_not_measured"] == 5
    assert t["metrics"]["tpot_s"]["count"] == 15
    lines = report.target_section("a", t)
    assert any(line.startswith("- TPOT not measured for 5 ok requests") for line in lines)
