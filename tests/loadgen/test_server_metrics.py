"""Server-side figures from two scrapes: histogram deltas, exact means, bucket estimates."""

from __future__ import annotations

import math

import pytest

from loadgen.server_metrics import Histogram, figure, parse, window

VLLM = """# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{{engine="0",le="0.3",model_name="llama-70b"}} {q03}
vllm:request_queue_time_seconds_bucket{{engine="0",le="0.5",model_name="llama-70b"}} {q05}
vllm:request_queue_time_seconds_bucket{{engine="0",le="0.8",model_name="llama-70b"}} {q08}
vllm:request_queue_time_seconds_bucket{{engine="0",le="+Inf",model_name="llama-70b"}} {qinf}
vllm:request_queue_time_seconds_count{{engine="0",model_name="llama-70b"}} {qinf}
vllm:request_queue_time_seconds_sum{{engine="0",model_name="llama-70b"}} {qsum}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="llama-70b"}} {waiting}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="llama-70b"}} {preempted}
"""

PROXY = """# HELP latency_proxy_overhead_seconds Time the proxy adds
# TYPE latency_proxy_overhead_seconds histogram
latency_proxy_overhead_seconds_bucket{{gen_ai_request_model="m",phase="request",le="0.001"}} {r}
latency_proxy_overhead_seconds_bucket{{gen_ai_request_model="m",phase="request",le="+Inf"}} {r}
latency_proxy_overhead_seconds_count{{gen_ai_request_model="m",phase="request"}} {r}
latency_proxy_overhead_seconds_sum{{gen_ai_request_model="m",phase="request"}} {rsum}
latency_proxy_overhead_seconds_bucket{{gen_ai_request_model="m",phase="event",le="0.001"}} 999
latency_proxy_overhead_seconds_bucket{{gen_ai_request_model="m",phase="event",le="+Inf"}} 999
latency_proxy_overhead_seconds_count{{gen_ai_request_model="m",phase="event"}} 999
latency_proxy_overhead_seconds_sum{{gen_ai_request_model="m",phase="event"}} 9
"""


def vllm(q03=0, q05=0, q08=0, qinf=0, qsum=0.0, waiting=0, preempted=0) -> str:
    return VLLM.format(**locals())


def test_the_window_holds_only_the_requests_that_finished_in_it() -> None:
    before = parse(vllm(q03=10, q05=10, q08=10, qinf=10, qsum=1.0, waiting=0), "v", 0.0)
    # 10 more requests: 2 under 0.3 s, 6 in (0.3, 0.5], 2 in (0.5, 0.8]; their sum 4.4 s
    after = parse(vllm(q03=12, q05=18, q08=20, qinf=20, qsum=5.4, waiting=7, preempted=3), "v", 9)
    figures, gauges, notes = window([before], [after])
    queue = figures["queue_s"]
    assert queue is not None and notes == []
    assert queue["count"] == 10
    assert queue["mean"] == pytest.approx(0.44)  # exact: from _sum and _count
    # the median (rank 5) falls in (0.3, 0.5]: 3 of its 6 requests in, linearly
    assert queue["p50"] == pytest.approx(0.3 + 0.2 * 3 / 6)
    assert queue["bounds"]["p50"] == [0.3, 0.5]
    assert queue["bounds"]["p99"] == [0.5, 0.8]
    assert queue["estimate"] == "buckets" and queue["source"] == "v"
    assert gauges == {"waiting": {"start": 0.0, "end": 7.0}, "preemptions": 3.0}
    assert figures["prefill_s"] is None  # not exposed there


def test_a_quantile_beyond_the_last_bound_says_only_that() -> None:
    h = Histogram(((0.5, 1.0), (math.inf, 10.0)), 30.0, 10.0)
    found = figure(h, "v")
    assert found is not None and found["p90"] == 0.5 and found["bounds"]["p90"] == [0.5, None]


def test_an_endpoint_without_traffic_in_the_window_gives_nothing() -> None:
    text = vllm(q03=5, q05=5, q08=5, qinf=5, qsum=1.0)
    figures, _, _ = window([parse(text, "v", 0)], [parse(text, "v", 1)])
    assert figures["queue_s"] is None


def test_the_proxys_overhead_is_its_request_phase_only() -> None:
    before = parse(PROXY.format(r=0, rsum=0), "p", 0)
    after = parse(PROXY.format(r=4, rsum=0.002), "p", 1)
    figures, _, _ = window([before], [after])
    overhead = figures["proxy_overhead_s"]
    assert overhead is not None and overhead["count"] == 4
    assert overhead["mean"] == pytest.approx(0.0005)


def test_two_endpoints_moving_at_once_are_not_mixed() -> None:
    a0, a1 = vllm(qinf=1, qsum=0.1), vllm(qinf=3, qsum=0.4)
    before = [parse(a0, "a", 0), parse(a0, "b", 0)]
    after = [parse(a1, "a", 1), parse(a1, "b", 1)]
    figures, _, notes = window(before, after)
    assert figures["queue_s"] is None
    assert notes == ["queue_s: several endpoints moved in this window (a, b); not mixed"]


def test_an_endpoint_missing_at_the_opening_is_said() -> None:
    figures, _, notes = window([], [parse(vllm(qinf=3, qsum=0.3), "v", 1)])
    assert figures["queue_s"] is None
    assert notes == ["v: no scrape when the window opened"]
