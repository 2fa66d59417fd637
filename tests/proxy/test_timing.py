"""Measurement correctness: the proxy reports 300 ms when the upstream waits 300 ms."""

from __future__ import annotations

import json
import uuid

import httpx

from tests.support.scripted_upstream import MODEL
from tests.support.timing import on_time, wall_clock

pytestmark = wall_clock


def run_stream(proxy, script: dict, path: str = "/v1/chat/completions") -> dict:
    rid = "t-" + uuid.uuid4().hex
    body = {
        "model": MODEL,  # the name the upstream lists: a label
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "prompt": "x",
    }
    with httpx.stream(
        "POST",
        proxy.url + path,
        json=body,
        timeout=30,
        headers={"x-request-id": rid, "x-script": json.dumps(script)},
    ) as r:
        for _ in r.iter_raw():
            pass
    (line,) = proxy.request_logs(rid)
    return line


def test_ttft_tpot_e2e_match_the_script(proxy) -> None:
    line = run_stream(proxy, {"ttft": 0.3, "itl": 0.05, "tokens": 6})
    assert on_time(line["time_to_first_chunk_s"], 0.0)  # the role chunk comes at once
    assert on_time(line["ttft_s"], 0.3)
    assert on_time(line["tpot_s"] * 5, 5 * 0.05)  # five gaps after the first token
    assert on_time(line["e2e_s"], 0.3 + 5 * 0.05)
    assert (line["output_tokens"], line["chunks"]) == (6, 6)


def test_chunked_stream_tpot_uses_tokens_not_events(proxy) -> None:
    # 4 chunks of 5 tokens, 100 ms apart: TPOT = 0.3 s / 19 tokens, not 0.3 s / 3 events
    line = run_stream(
        proxy, {"ttft": 0.2, "itl": 0.1, "tokens": 20, "per_chunk": 5}, path="/v1/completions"
    )
    assert line["output_tokens"] == 20 and line["chunks"] == 4
    assert on_time(line["tpot_s"] * 19, 0.3)  # 3 events would make it 0.1 s per token


def sample(metrics: str, series: str) -> float:
    """The value of one series in a /metrics text, 0 while it does not exist yet."""
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.rpartition(" ")[2])
    return 0.0


def test_time_to_first_n_tokens_in_metrics(proxy) -> None:
    labels = (
        f'{{gen_ai_operation_name="chat",gen_ai_request_model="{MODEL}",'
        'latency_proxy_route="default",n="3"}'
    )
    count = "latency_proxy_time_to_first_n_tokens_seconds_count" + labels
    total = "latency_proxy_time_to_first_n_tokens_seconds_sum" + labels
    before = proxy.metrics()
    run_stream(proxy, {"ttft": 0.25, "itl": 0.1, "tokens": 4})  # returns once it is recorded
    after = proxy.metrics()
    assert sample(after, count) == sample(before, count) + 1
    assert on_time(sample(after, total) - sample(before, total), 0.25 + 2 * 0.1)  # 3rd token
