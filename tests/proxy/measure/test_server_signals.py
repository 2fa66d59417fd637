"""Server signals end to end: the simulator with vLLM's serving flags, measured direct (the
meter on the client's side, as loadgen runs it) and through the proxy (its log line and
CLIENT span). Answer TTFT against the scripted reasoning time, cached tokens against the
simulator's prefix cache, the server's timings against its clock, a scripted stall."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from latency_proxy.measure.meter import ReasoningSource, RequestTiming, StreamMeter
from latency_proxy.measure.sse import SSEParser
from loadgen.sim.model import presets
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.serving import Serving
from loadgen.stack.processes import free_port
from tests.support.proxy import proxy_env
from tests.support.scripted_upstream import ServerThread
from tests.support.timing import LATE, on_time, wall_clock

pytestmark = wall_clock

ALL_FLAGS = Serving("qwen3", prompt_tokens_details=True, per_request_metrics=True)
USAGE = {"include_usage": True}
CANARY = "CANARYTHOUGHT"


@contextlib.contextmanager
def simulator(**app: Any) -> Iterator[tuple[str, Any]]:
    application = create_app(**app)
    port = free_port()
    with ServerThread(application, port):
        yield f"http://127.0.0.1:{port}", application.state.sim


def measure(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> RequestTiming:
    """One streamed chat completion, metered on arrival as loadgen meters it."""
    parser = SSEParser()
    with httpx.Client(timeout=30) as client:
        t0 = time.perf_counter()
        meter = StreamMeter(t0)
        with client.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers or {}
        ) as r:
            assert r.status_code == 200
            for chunk in r.iter_raw():
                now = time.perf_counter()
                for event in parser.feed(chunk):
                    meter.on_event(now, event)
        return meter.finish(time.perf_counter())


def chat(prompt: str = "tell me", max_tokens: int = 30) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": USAGE,
    }


@pytest.fixture(scope="module")
def reasoning_server() -> Iterator[tuple[str, Any]]:
    """Fixed timing: first token after 0.1 s, then one every 20 ms; scripted reasoning."""
    with simulator(ttft=0.1, itl=0.02, script={}, serving=ALL_FLAGS) as served:
        yield served


@pytest.fixture(scope="module")
def reasoning_proxy(start_module_proxy, reasoning_server, otlp):
    return start_module_proxy("--upstream", reasoning_server[0], env=proxy_env(otlp))


REASONING_SCRIPT = {"tokens": 30, "reasoning_tokens": 20}
ANSWER_AT = 0.1 + 20 * 0.02  # the 21st token: the answer's first


def test_answer_ttft_is_the_scripted_reasoning_time_direct(reasoning_server) -> None:
    headers = {"x-script": json.dumps(REASONING_SCRIPT)}
    r = measure(reasoning_server[0], chat(), headers)
    assert on_time(r.ttft_s, 0.1)
    assert on_time(r.answer_ttft_s, ANSWER_AT)
    assert (r.reasoning_tokens, r.reasoning_source) == (20, ReasoningSource.SERVER)
    assert r.output_tokens == 30
    assert on_time(r.reasoning_s, ANSWER_AT - 0.1)


def test_answer_ttft_through_the_proxy(reasoning_proxy, otlp) -> None:
    rid = "reason-" + uuid.uuid4().hex
    headers = {"x-script": json.dumps(REASONING_SCRIPT), "x-request-id": rid}
    r = measure(reasoning_proxy.url, chat(), headers)
    assert on_time(r.answer_ttft_s, ANSWER_AT)  # the client sees what the proxy passed on
    [line] = reasoning_proxy.request_logs(rid)
    assert on_time(line["ttft_s"], 0.1)
    assert on_time(line["answer_ttft_s"], ANSWER_AT)
    assert line["reasoning_tokens"] == 20 and line["reasoning_source"] == "server"
    spans = otlp.wait_for_spans(
        lambda spans: any(s.attributes.get("latency_proxy.request_id") == rid for s in spans),
        timeout=10,
    )
    client = next(
        s for s in spans if s.kind == "CLIENT" and s.attributes["latency_proxy.request_id"] == rid
    )
    assert client.attributes["gen_ai.usage.reasoning.output_tokens"] == 20
    assert on_time(client.attributes["latency_proxy.answer_ttft_s"], ANSWER_AT)
    metrics = reasoning_proxy.metrics()
    assert "latency_proxy_time_to_first_answer_token_seconds_bucket" in metrics
    assert "latency_proxy_reasoning_tokens_bucket" in metrics


def test_server_timings_are_the_simulators_clock(reasoning_server, reasoning_proxy) -> None:
    """Fixed timing schedules itself from arrival: no queue, the first token 0.1 s and the
    last 0.68 s after it; the meter reads them unchanged, direct and through the proxy."""
    headers = {"x-script": json.dumps({"tokens": 30})}
    for url in (reasoning_server[0], reasoning_proxy.url):
        rid = "clock-" + uuid.uuid4().hex
        r = measure(url, chat(), {**headers, "x-request-id": rid})
        assert r.server_queue_s == 0.0
        assert on_time(r.server_ttft_s, 0.1)
        # tokens are due on a schedule from arrival: a late first token shortens the decode
        assert on_time(r.server_ttft_s + r.server_decode_s, 0.1 + 29 * 0.02)
        assert r.server_itl_s == pytest.approx(r.server_decode_s / 29)
        assert r.server_ttft_s <= r.ttft_s  # the client's clock also holds the network
    [line] = reasoning_proxy.request_logs(rid)
    assert line["server_ttft_s"] == r.server_ttft_s  # the proxy logs what the server sent
    assert line["server_decode_s"] == r.server_decode_s


def test_a_scripted_2s_stall_is_counted_once(reasoning_server, reasoning_proxy) -> None:
    script = {"tokens": 10, "hang_after": 4, "hang_s": 2.0}
    rid = "stall-" + uuid.uuid4().hex
    headers = {"x-script": json.dumps(script), "x-request-id": rid}
    direct = measure(reasoning_server[0], chat(), {"x-script": json.dumps(script)})
    proxied = measure(reasoning_proxy.url, chat(), headers)
    for r in (direct, proxied):
        assert r.stalls == 1
        assert 2.0 - 0.005 <= r.max_itl_s <= 2.0 + 0.02 * 4 + LATE
    [line] = reasoning_proxy.request_logs(rid)
    assert line["stalls"] == 1 and 2.0 - 0.005 <= line["max_itl_s"] <= 2.0 + 0.02 * 4 + LATE
    assert "latency_proxy_stalls_total" in reasoning_proxy.metrics()


def test_reasoning_text_is_never_recorded_with_capture_off(reasoning_proxy, otlp) -> None:
    """Reasoning is content: with capture off no log line or span holds it, a stream cut
    mid-thought included."""
    rids = []
    for extra in ({}, {"die_after": 3}):
        rid = "canary-" + uuid.uuid4().hex
        rids.append(rid)
        script = {"tokens": 6, "reasoning_tokens": 6, "text": CANARY, **extra}
        with contextlib.suppress(httpx.HTTPError):
            measure(
                reasoning_proxy.url, chat(), {"x-script": json.dumps(script), "x-request-id": rid}
            )
    for rid in rids:
        assert reasoning_proxy.request_logs(rid)
    spans = otlp.wait_for_spans(
        lambda spans: all(
            any(s.attributes.get("latency_proxy.request_id") == rid for s in spans) for rid in rids
        ),
        timeout=10,
    )
    assert CANARY not in reasoning_proxy.output()
    for span in spans:
        assert CANARY not in json.dumps([span.attributes, span.events], default=str)


def test_cached_tokens_are_the_prefix_cache_hit_of_a_repeated_prompt(start_proxy) -> None:
    preset = presets.load("llama-2-7b-bf16-h200")
    serving = Serving(prompt_tokens_details=True, per_request_metrics=True)
    prompt = " ".join(f"word{i}" for i in range(150))
    with simulator(preset=preset, serving=serving) as (url, sim):
        proxy = start_proxy("--upstream", url, env=proxy_env(None))
        first = measure(url, chat(prompt, 4))
        hits = sim.backend.scheduler.prefix_cache_hits
        rid = "cache-" + uuid.uuid4().hex
        again = measure(proxy.url, chat(prompt, 4), {"x-request-id": rid})
        hit = sim.backend.scheduler.prefix_cache_hits - hits
    block = preset.engine.block_size
    assert first.cached_tokens == 0
    assert hit > 0 and hit % block == 0
    assert again.cached_tokens == hit
    assert hit == (again.input_tokens - 1) // block * block  # all but the last partial block
    [line] = proxy.request_logs(rid)
    assert line["cached_tokens"] == hit
    assert again.server_queue_s is not None and again.server_queue_s >= 0
    assert again.server_ttft_s is not None and again.server_ttft_s <= again.ttft_s
    assert "latency_proxy_cached_token_fraction_ratio_bucket" in proxy.metrics()


def test_the_current_genai_names_replace_the_older_when_opted_in(
    start_proxy, reasoning_server
) -> None:
    env = {**proxy_env(None), "OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"}
    proxy = start_proxy("--upstream", reasoning_server[0], env=env)
    measure(proxy.url, chat(), {"x-script": json.dumps(REASONING_SCRIPT)})
    text = proxy.metrics()
    for name in (
        "gen_ai_client_inference_time_to_first_chunk_seconds_bucket",
        "gen_ai_client_inference_time_per_output_chunk_seconds_bucket",
        "gen_ai_client_inference_operation_input_tokens_bucket",
        "gen_ai_client_inference_usage_output_tokens_total",
        "gen_ai_client_inference_usage_reasoning_output_tokens_total",
        "gen_ai_client_inference_usage_cache_read_input_tokens_total",
    ):
        assert name in text, name
    assert "gen_ai_client_token_usage" not in text
    assert "gen_ai_client_operation_time_to_first_chunk" not in text
    assert "gen_ai_server_time_to_first_token_seconds_bucket" in text  # unchanged names stay


def test_the_proxy_reads_the_report_from_the_usage_chunk_it_asked_for(reasoning_proxy) -> None:
    """The client asked for no usage: the proxy asks for it, meters the report, strips it."""
    rid = "own-usage-" + uuid.uuid4().hex
    body = {k: v for k, v in chat().items() if k != "stream_options"}
    headers = {"x-script": json.dumps(REASONING_SCRIPT), "x-request-id": rid}
    r = measure(reasoning_proxy.url, body, headers)
    assert r.server_ttft_s is None and r.reasoning_source is ReasoningSource.COUNTED  # stripped
    [line] = reasoning_proxy.request_logs(rid)
    assert line["reasoning_tokens"] == 20 and line["reasoning_source"] == "server"
    assert on_time(line["server_ttft_s"], 0.1) and line["cached_tokens"] == 0
