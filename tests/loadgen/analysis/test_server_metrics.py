"""Server-side figures from two scrapes: histogram deltas, exact means, bucket estimates."""

from __future__ import annotations

import math

import orjson
import pytest

from loadgen.analysis.server_metrics import (
    Histogram,
    ServerWindow,
    Snapshot,
    difference,
    figure,
    parse,
    server_block,
)

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


def windows(pairs: list[tuple[Snapshot, Snapshot]], target: str = "t") -> list[ServerWindow]:
    return [difference(a, b, target=target, block=i, level=None) for i, (a, b) in enumerate(pairs)]


def test_the_window_holds_only_the_requests_that_finished_in_it() -> None:
    before = parse(vllm(q03=10, q05=10, q08=10, qinf=10, qsum=1.0, waiting=0), "v", 0.0)
    # 10 more requests: 2 under 0.3 s, 6 in (0.3, 0.5], 2 in (0.5, 0.8]; their sum 4.4 s
    after = parse(vllm(q03=12, q05=18, q08=20, qinf=20, qsum=5.4, waiting=7, preempted=3), "v", 9)
    block = server_block(windows([(before, after)]))
    assert block is not None
    queue = block["queue_s"]
    assert queue is not None and block["notes"] == []
    assert queue["count"] == 10
    assert queue["mean"] == pytest.approx(0.44)  # exact: from _sum and _count
    # the median (rank 5) falls in (0.3, 0.5]: 3 of its 6 requests in, linearly
    assert queue["p50"] == pytest.approx(0.3 + 0.2 * 3 / 6)
    assert queue["bounds"]["p50"] == [0.3, 0.5]
    assert queue["bounds"]["p99"] == [0.5, 0.8]
    assert queue["estimate"] == "buckets" and queue["source"] == "v"
    assert block["gauges"] == {"waiting": {"start": 0.0, "end": 7.0}, "preemptions": 3.0}
    assert block["prefill_s"] is None  # not exposed there
    assert block["sources"] == ["v"]


def test_blocks_of_one_target_add_up() -> None:
    a = parse(vllm(q03=1, q05=1, q08=1, qinf=1, qsum=0.1), "v", 0)
    b = parse(vllm(q03=3, q05=3, q08=3, qinf=3, qsum=0.5), "v", 1)  # +2, sum +0.4
    c = parse(vllm(q03=3, q05=3, q08=3, qinf=3, qsum=0.5), "v", 2)
    d = parse(vllm(q03=3, q05=5, q08=5, qinf=5, qsum=1.5), "v", 3)  # +2, sum +1.0
    block = server_block(windows([(a, b), (c, d)]))
    assert block is not None and block["queue_s"]["count"] == 4
    assert block["queue_s"]["mean"] == pytest.approx(1.4 / 4)


def test_a_window_survives_run_json() -> None:
    before = parse(vllm(qinf=1, qsum=0.1, waiting=2), "v", 0)
    after = parse(vllm(q08=2, qinf=3, qsum=0.4, waiting=1), "v", 1)
    (window,) = windows([(before, after)])
    again = ServerWindow.from_dict(orjson.loads(orjson.dumps(window.to_dict())))
    assert again == window
    assert math.isinf(again.histograms["vllm:request_queue_time_seconds"].buckets[-1][0])


def test_a_quantile_beyond_the_last_bound_says_only_that() -> None:
    h = Histogram(((0.5, 1.0), (math.inf, 10.0)), 30.0, 10.0)
    found = figure(h, "v")
    assert found is not None and found["p90"] == 0.5 and found["bounds"]["p90"] == [0.5, None]


def test_an_endpoint_without_traffic_in_the_window_gives_nothing() -> None:
    text = vllm(q03=5, q05=5, q08=5, qinf=5, qsum=1.0)
    block = server_block(windows([(parse(text, "v", 0), parse(text, "v", 1))]))
    assert block is not None and block["queue_s"] is None
    assert server_block([]) is None  # not sampled at all


def test_the_proxys_overhead_is_its_request_phase_only() -> None:
    before = parse(PROXY.format(r=0, rsum=0), "p", 0)
    after = parse(PROXY.format(r=4, rsum=0.002), "p", 1)
    block = server_block(windows([(before, after)]))
    assert block is not None
    overhead = block["proxy_overhead_s"]
    assert overhead is not None and overhead["count"] == 4
    assert overhead["mean"] == pytest.approx(0.0005)


def test_two_endpoints_moving_at_once_are_not_mixed() -> None:
    a0, a1 = vllm(qinf=1, qsum=0.1), vllm(qinf=3, qsum=0.4)
    pairs = [(parse(a0, "a", 0), parse(a1, "a", 1)), (parse(a0, "b", 0), parse(a1, "b", 1))]
    block = server_block(windows(pairs))
    assert block is not None and block["queue_s"] is None
    assert block["notes"] == [
        "queue_s: several endpoints moved in these windows (a, b); not mixed"
    ]
