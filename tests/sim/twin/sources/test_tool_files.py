"""Other benchmark tools' files, as the tools wrote them (fixtures/README.md), read into a
capture: the format told from the content, every request counted once, each load on its
own clock."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from loadgen.sim.twin import capture, fit_targets
from loadgen.sim.twin.figures import percentile
from loadgen.sim.twin.sources import rebuilt
from loadgen.sim.twin.sources.stream import PER_REQUEST, REBUILT

FIXTURES = Path(__file__).parent / "fixtures"
AIPERF = FIXTURES / "aiperf" / "profile_export.jsonl"
GUIDELLM = FIXTURES / "guidellm" / "benchmarks.json"
INFERENCE_PERF = FIXTURES / "inference-perf" / "per_request_lifecycle_metrics.json"
VLLM_R4 = FIXTURES / "vllm-bench" / "vllm-bench-r4.json"
VLLM_R10 = FIXTURES / "vllm-bench" / "vllm-bench-r10-b05.json"


def test_aiperf_records_are_requests_on_the_wall_clock() -> None:
    records = [json.loads(line) for line in AIPERF.read_text().splitlines()]
    got = capture.read([str(AIPERF)])
    assert got.sources[0].format == "AIPerf"
    assert got.sources[0].fitted == PER_REQUEST
    assert len(got.requests) + got.failed == len(records)
    first = min(records, key=lambda r: r["metadata"]["request_start_ns"])
    r0 = got.requests[0]
    assert r0.arrival == 0
    assert r0.ttft == pytest.approx(first["metrics"]["time_to_first_token"]["value"] / 1e3)
    assert r0.prompt_tokens == first["metrics"]["usage_prompt_tokens"]["value"]  # the server's
    assert r0.output_tokens == first["metrics"]["output_sequence_length"]["value"]
    last = max(r["metadata"]["request_start_ns"] for r in records)
    span = (last - first["metadata"]["request_start_ns"]) / 1e9
    assert got.requests[-1].arrival == pytest.approx(span, abs=1e-6)


def test_each_guidellm_benchmark_is_a_load_of_its_own() -> None:
    document = json.loads(GUIDELLM.read_text())
    benchmarks = document["benchmarks"]
    got = capture.read([str(GUIDELLM)])
    assert got.sources[0].format == "GuideLLM"
    assert got.sources[0].streams == len(benchmarks) == 2
    sizes = [len(b["requests"]["successful"]) for b in benchmarks]
    assert len(got.requests) == sum(sizes)
    first, second = got.requests[: sizes[0]], got.requests[sizes[0] :]
    # the second benchmark starts once the first has drained, not at the hour it ran
    gap = second[0].arrival - first[-1].arrival
    assert capture.DRAIN_MIN <= gap < 60
    request = benchmarks[1]["requests"]["successful"][0]
    assert second[0].ttft == pytest.approx(request["time_to_first_token_ms"] / 1e3)
    assert second[0].tpot == pytest.approx(request["inter_token_latency_ms"] / 1e3)


def test_inference_perf_requests_are_timed_from_their_output_tokens() -> None:
    document = json.loads(INFERENCE_PERF.read_text())
    got = capture.read([str(INFERENCE_PERF)])
    assert got.sources[0].format == "inference-perf"
    assert len(got.requests) + got.failed == len(document)
    first = min(document, key=lambda r: r["start_time"])
    times = first["info"]["response_metrics"]["output_token_times"]
    assert got.requests[0].ttft == pytest.approx(times[0] - first["start_time"])
    # the tool's own figures, which the trimmed file kept, agree
    assert got.requests[0].ttft == pytest.approx(first["computed_metrics"]["time_to_first_token"])
    assert got.requests[0].tpot == pytest.approx((times[-1] - times[0]) / (len(times) - 1))


def test_vllm_bench_with_start_times_is_fitted_per_request() -> None:
    document = json.loads(VLLM_R10.read_text())
    got = capture.read([str(VLLM_R10)])
    assert got.sources[0].format == "vLLM bench serve"
    assert got.sources[0].fitted == PER_REQUEST
    assert len(got.requests) == document["completed"]
    order = sorted(range(len(document["start_times"])), key=lambda i: document["start_times"][i])
    for r, i in zip(got.requests, order, strict=True):
        assert r.ttft == pytest.approx(document["ttfts"][i])
        assert r.prompt_tokens == document["input_lens"][i]


def test_two_runs_on_their_own_clocks_are_never_one_load() -> None:
    got = capture.read([str(VLLM_R4), str(VLLM_R10)])
    first = [r for r in got.requests if r.source == 0]
    second = [r for r in got.requests if r.source == 1]
    assert len(first) == 60 and len(second) == 60
    assert min(r.arrival for r in second) >= max(r.arrival for r in first) + capture.DRAIN_MIN


def test_wall_clock_sources_that_overlap_are_one_load(tmp_path: Path) -> None:
    """Two halves of one AIPerf run, given as two files, interleave again."""
    lines = AIPERF.read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[0::2]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[1::2]) + "\n")
    whole = capture.read([str(AIPERF)])
    halves = capture.read([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    assert [r.arrival for r in halves.requests] == pytest.approx(
        [r.arrival for r in whole.requests]
    )
    assert {r.source for r in halves.requests[:10]} == {0, 1}


def test_a_file_is_known_by_its_content_not_its_name(tmp_path: Path) -> None:
    renamed = tmp_path / "results.txt"
    shutil.copy(GUIDELLM, renamed)
    assert capture.read([str(renamed)]).sources[0].format == "GuideLLM"


VLLM_OLD = FIXTURES / "vllm-bench" / "vllm-bench-0.13-r6-b07.json"


def test_a_vllm_run_without_send_times_is_rebuilt_from_its_settings() -> None:
    document = json.loads(VLLM_OLD.read_text())
    assert "start_times" not in document  # vLLM 0.13 did not write them
    got = capture.read([str(VLLM_OLD)])
    (source,) = got.sources
    assert source.fitted == REBUILT
    assert source.settings == [{"request_rate": 6.0, "burstiness": 0.7, "seed": 0, "requests": 60}]
    assert all(r.rebuilt for r in got.requests)
    # vLLM's schedule: the last request due at n/rate after the start, the first at 0 here
    first_due = rebuilt.arrivals(60, 6.0, 0.7, 0)[0]
    assert got.requests[-1].arrival == pytest.approx(60 / 6.0 - first_due)
    # lengths and timings are the file's, in its order
    assert sorted(r.ttft for r in got.requests) == pytest.approx(sorted(document["ttfts"]))
    assert sorted(r.prompt_tokens for r in got.requests) == sorted(document["input_lens"])


def test_rebuilt_requests_are_fitted_by_their_percentiles() -> None:
    got = capture.read([str(VLLM_OLD)])
    fitted_to = fit_targets.Targets.of(got, range(len(got.requests)))
    assert fitted_to.groups and all(q is not None for *_, q in fitted_to.groups)
    ttft = sorted(r.ttft for r in got.requests if r.ttft is not None)
    median = next(g for g in fitted_to.groups if g[1] == "ttft" and g[4] == 0.5)
    assert median[2] == pytest.approx(math.log(percentile(ttft, 50) + fit_targets.FLOOR["ttft"]))


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_rebuilt_arrivals_keep_the_rate_and_the_burstiness(burstiness: float) -> None:
    n, rate = 4000, 5.0
    at = rebuilt.arrivals(n, rate, burstiness, seed=3)
    assert at == rebuilt.arrivals(n, rate, burstiness, seed=3)  # the seed decides
    assert at[-1] == pytest.approx(n / rate)
    gaps = [b - a for a, b in zip([0.0, *at], at, strict=False)]
    mean = sum(gaps) / n
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / n) / mean
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)  # a gamma of that shape


def test_evenly_spaced_arrivals_at_infinite_burstiness() -> None:
    assert rebuilt.arrivals(4, 2.0, math.inf, 0) == pytest.approx([0.5, 1.0, 1.5, 2.0])
