"""The simulator's engines over real HTTP on loopback: fixed timing, continuous batching,
its /metrics and spans."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time

import httpx
import pytest

from latency_proxy.measure.meter import RequestTiming
from loadgen.sim.model import presets
from loadgen.sim.realtime.fixed import FixedTiming
from loadgen.sim.realtime.metrics import SimMetrics
from tests.sim.app_server import MESSAGES, USAGE, arrivals, completion_timing, serve, stream
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.timing import EARLY, LATE, on_time, wall_clock

pytestmark = wall_clock  # every test here times the engine over HTTP


def test_fixed_timing_is_exact() -> None:
    async def go() -> list[RequestTiming]:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": "sim", "messages": MESSAGES, "max_tokens": 20, "stream_options": USAGE}
            results = await asyncio.gather(
                *[stream(client, server.url + "/v1/chat/completions", body) for _ in range(8)]
            )
            return [r for r, _ in results]

    with serve(ttft=0.2, itl=0.02) as server:
        timings = asyncio.run(go())
    for t in timings:  # eight at once: no queueing in fixed mode
        assert t.output_tokens == 20 and t.content_events == 20
        assert t.time_to_first_chunk_s < LATE  # the role chunk comes at once
        # every token on its absolute schedule: one delivered late does not push the rest
        assert all(on_time(at, 0.2 + i * 0.02) for i, at in enumerate(arrivals(t)))
        assert statistics.median(t.itl_s) == pytest.approx(0.02, abs=0.004)


def test_stream_interval_groups_tokens_per_chunk() -> None:
    with serve(ttft=0.05, itl=0.01, stream_interval=4) as server:
        timing = completion_timing(server, {"prompt": "one two", "max_tokens": 10})
    assert timing.tokens_per_chunk == [1, 4, 4, 1]
    # k × itl between chunks, then the remainder
    schedule = [0.05, 0.05 + 0.04, 0.05 + 0.08, 0.05 + 0.09]
    assert all(on_time(at, due) for at, due in zip(arrivals(timing), schedule, strict=True))
    assert on_time(timing.ttfnt_s[3], 0.05 + 0.04)


def test_jitter_spreads_gaps_within_its_bounds() -> None:
    with serve(ttft=0.05, itl=0.02, jitter=0.5, seed=1) as server:
        timing = completion_timing(server, {"prompt": "a", "max_tokens": 30})
    # a late timer on a loaded 2-core box stretches one gap and shrinks the next: most
    # gaps, not all, must lie within the jitter's bounds
    within = [0.01 - 0.003 <= gap <= 0.03 + 0.008 for gap in timing.itl_s]
    assert sum(within) >= 0.9 * len(within), timing.itl_s
    assert statistics.pstdev(timing.itl_s) > 0.003
    assert 0.025 - 0.003 <= timing.ttft_s <= 0.075 + 0.03


def test_jitter_is_seeded() -> None:
    def draws(seed: int) -> list[float]:
        timing = FixedTiming(0.1, 0.01, SimMetrics("m", 10), seed=seed, jitter=0.2)
        scale = timing._scaler()
        return [scale() for _ in range(20)]

    assert draws(1) == draws(1) != draws(2)
    assert all(0.8 <= x <= 1.2 for x in draws(3))


def test_engine_timing_follows_the_performance_model() -> None:
    preset = presets.load("mpt-7b-fp16-a100")
    with serve(preset=preset) as server:
        timing = completion_timing(
            server, {"prompt": "word " * 1000, "max_tokens": 40, "ignore_eos": True}
        )
        assert server.metric("vllm:time_to_first_token_seconds_count", model_name="mpt-7b") == 1
        assert server.metric("vllm:generation_tokens_total") == 40
        assert server.metric("vllm:prompt_tokens_total") == 1000
        assert server.metric("vllm:request_success_total", finished_reason="length") == 1
        assert server.metric("loadgen_sim_schedule_lag_seconds_count") >= 40  # one per step
        openmetrics = httpx.get(
            server.url + "/metrics", headers={"Accept": "application/openmetrics-text"}
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")
    prefill = preset.perf.step_time(1000, 1000).total
    decode = preset.perf.step_time(1, 1020).total
    assert on_time(timing.ttft_s, prefill)
    assert timing.tpot_s == pytest.approx(decode, rel=0.15)


def test_the_front_end_hands_a_burst_to_the_engine_one_request_at_a_time() -> None:
    base = presets.load("mpt-7b-fp16-a100")
    efficiency = dataclasses.replace(
        base.perf.efficiency, frontend_request=0.1, frontend_token=50e-6
    )
    preset = dataclasses.replace(
        base,
        perf=dataclasses.replace(base.perf, efficiency=efficiency),
        engine=dataclasses.replace(base.engine, enable_prefix_caching=False),  # one prompt twice
    )
    body = {"prompt": "word " * 1000, "max_tokens": 2, "ignore_eos": True, "stream_options": USAGE}

    async def burst(url: str) -> list[float]:
        async with httpx.AsyncClient(timeout=10) as client:
            done = await asyncio.gather(*(stream(client, url, body) for _ in range(2)))
            return sorted(timing.ttft_s for timing, _ in done)

    with serve(preset=preset) as server:
        first, second = asyncio.run(burst(server.url + "/v1/completions"))
    front = 0.1 + 50e-6 * 1000  # per request + per input token
    prefill = base.perf.step_time(1000, 1000).total
    assert on_time(first, front + prefill)
    # the second waits for the first's front end, then for at most the first's prefill
    assert 2 * front + prefill - EARLY <= second <= 2 * front + 2 * prefill + LATE


def test_the_front_ends_output_work_holds_each_token_until_it_is_sent() -> None:
    """At 0.1 s a token the front end, not the engine's 10 ms steps, sets the pace."""
    base = presets.load("mpt-7b-fp16-a100")
    efficiency = dataclasses.replace(base.perf.efficiency, frontend_output_token=0.1)
    preset = dataclasses.replace(base, perf=dataclasses.replace(base.perf, efficiency=efficiency))
    body = {"prompt": "word " * 100, "max_tokens": 3, "ignore_eos": True}
    with serve(preset=preset) as server:
        timing = completion_timing(server, body)
    prefill = base.perf.step_time(timing.input_tokens, timing.input_tokens).total
    assert on_time(timing.ttft_s, prefill + 0.1)
    assert timing.tpot_s == pytest.approx(0.1, abs=0.01)


def test_engine_releases_chunks_every_stream_interval_tokens() -> None:
    preset = presets.load("llama-2-7b-bf16-h200")
    with serve(preset=preset, stream_interval=4) as server:
        timing = completion_timing(
            server, {"prompt": "a b c", "max_tokens": 33, "ignore_eos": True}
        )
    assert timing.tokens_per_chunk == [1] + [4] * 8
    step = preset.perf.step_time(1, 8).total
    assert statistics.median(timing.itl_s) == pytest.approx(4 * step, abs=0.006)


def test_engine_batches_and_exports_vllm_and_dcgm_gauges() -> None:
    body = {"prompt": "x " * 200, "max_tokens": 200, "ignore_eos": True, "stream_options": USAGE}

    async def go(n: int) -> tuple[list[RequestTiming], float, float, str]:
        async with httpx.AsyncClient(timeout=20) as client:
            tasks = [
                asyncio.create_task(stream(client, server.url + "/v1/completions", body))
                for _ in range(n)
            ]
            # poll (no fixed sleep) until the batch is in the engine, at most 5 s
            deadline = time.monotonic() + 5
            while True:
                await asyncio.sleep(0.05)
                running = await asyncio.to_thread(server.metric, "vllm:num_requests_running")
                kv = await asyncio.to_thread(server.metric, "vllm:kv_cache_usage_perc")
                if (running == n and kv > 0) or time.monotonic() > deadline:
                    break
            # DCGM's gauges are means over the last second: read them while the batch has run
            # for a while, from one scrape, since after it ends they fall back to idle
            deadline = time.monotonic() + 5
            while True:
                await asyncio.sleep(0.05)
                scrape = await asyncio.to_thread(server.scrape)
                busy = server.metric("DCGM_FI_DEV_GPU_UTIL", scrape, gpu="0") >= 10
                if busy or all(task.done() for task in tasks) or time.monotonic() > deadline:
                    break
            return [t for t, _ in await asyncio.gather(*tasks)], running, kv, scrape

    preset = presets.load("llama-2-7b-bf16-h200")
    with serve(preset=preset) as server:
        [alone], _, _, _ = asyncio.run(go(1))
        timings, running, kv, scrape = asyncio.run(go(32))
        util = server.metric("DCGM_FI_DEV_GPU_UTIL", scrape, gpu="0")
        power = server.metric("DCGM_FI_DEV_POWER_USAGE", scrape, gpu="0")
        fb = server.metric("DCGM_FI_DEV_FB_USED", scrape, gpu="0", modelName="NVIDIA H200")
        idle_running = server.metric("vllm:num_requests_running")
    assert running == 32 and 0 < kv < 1
    batched = preset.perf.step_time(32, 32 * 300, sequences=32).total  # ~200 in + ~100 out each
    # the client can only see the model's time or later (a loaded box delays delivery)
    single = preset.perf.step_time(1, 300).total
    assert 0.9 * single <= alone.tpot_s <= 1.5 * single
    # 32 streams on a loaded 2-core box: each step's wake-up and 32 sends come late, never early
    assert 0.9 * batched <= statistics.median(t.tpot_s for t in timings) <= 2 * batched
    assert batched > alone.tpot_s
    assert 10 <= util <= 100 and 75 < power <= 700
    assert fb == pytest.approx(141e9 * 0.9 / 2**20, rel=0.01)
    assert idle_running == 0


def test_client_disconnect_aborts_the_request_and_frees_its_slot() -> None:
    body = {"prompt": "x " * 100, "max_tokens": 1500, "ignore_eos": True}

    async def go() -> tuple[float, float]:
        async with httpx.AsyncClient(timeout=10) as client:
            async with client.stream(
                "POST", server.url + "/v1/completions", json={**body, "stream": True}
            ) as response:
                assert response.status_code == 200
                chunks = response.aiter_raw()
                await anext(chunks)
                streaming = await asyncio.to_thread(server.metric, "vllm:num_requests_running")
            plain = asyncio.create_task(client.post(server.url + "/v1/completions", json=body))
            await asyncio.sleep(0.3)
            waiting = await asyncio.to_thread(server.metric, "vllm:num_requests_running")
            plain.cancel()
            return streaming, waiting

    with serve(preset="mpt-7b-fp16-a100") as server:
        streaming, waiting = asyncio.run(go())
        deadline = time.monotonic() + 5
        while server.metric("vllm:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert streaming == 1 and waiting == 1
        assert server.metric("vllm:num_requests_running") == 0
        assert server.metric("vllm:kv_cache_usage_perc") == 0
        assert server.metric("vllm:generation_tokens_total") < 200  # neither ran to 1,500


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_llm_request_span_continues_the_callers_trace(
    monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    with OTLPReceiver() as rx:
        endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.endpoint
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        with serve(ttft=0.05, itl=0.01) as server:
            response = httpx.post(
                server.url + "/v1/chat/completions",
                json={"model": "sim", "messages": MESSAGES, "max_tokens": 5, "top_p": 0.5},
                headers={"traceparent": f"00-{trace_id}-{parent}-01", "X-Request-Id": "r-7"},
            )
            assert response.status_code == 200
            spans = rx.wait_for_spans(lambda s: any(x.name == "llm_request" for x in s), 10)
    [span] = [s for s in spans if s.name == "llm_request"]
    assert (span.trace_id, span.parent_span_id, span.kind) == (trace_id, parent, "SERVER")
    a = span.attributes
    assert a["gen_ai.request.id"] == "r-7" and a["gen_ai.response.model"] == "sim"
    assert a["gen_ai.usage.prompt_tokens"] == 5 and a["gen_ai.usage.completion_tokens"] == 5
    assert a["gen_ai.request.max_tokens"] == 5 and a["gen_ai.request.top_p"] == 0.5
    assert on_time(a["gen_ai.latency.time_to_first_token"], 0.05)
    assert on_time(a["gen_ai.latency.e2e"], 0.05 + 4 * 0.01)
    assert a["gen_ai.latency.time_in_queue"] == 0
    assert span.resource["service.name"] == "loadgen-sim"
    assert "say something" not in repr(span)


def test_a_repeated_prompt_hits_the_prefix_cache() -> None:
    preset = presets.load("llama-70b-bf16-tp4-a100")
    first, other = "word " * 2000, "other " * 2000

    async def ttft(prompt: str) -> float:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"prompt": prompt, "max_tokens": 2, "ignore_eos": True}
            timing, _ = await stream(client, server.url + "/v1/completions", body)
            assert timing.ttft_s is not None
            return timing.ttft_s

    with serve(preset=preset) as server:
        cold = asyncio.run(ttft(first))
        assert server.metric("vllm:prefix_cache_hits_total") == 0
        warm = asyncio.run(ttft(first))
        hits = server.metric("vllm:prefix_cache_hits_total")
        unrelated = asyncio.run(ttft(other))
        queries = server.metric("vllm:prefix_cache_queries_total")
        assert server.metric("vllm:prefix_cache_hits_total") == hits
    assert hits == 1999 // 16 * 16  # every full block but the one holding the last token
    assert queries == 3 * 2000
    prefill = preset.perf.step_time(2000, 2000, 2000 * 2001 // 2).total
    assert prefill <= cold and prefill <= unrelated
    assert warm < cold / 4  # 16 tokens computed instead of 2,000


def test_greedy_answers_depend_on_the_prompt_alone_not_the_batch() -> None:
    """As a batch-invariant greedy engine: the same prompt at temperature 0 gives the same
    text alone and amid a full batch; the GPUs' energy counter grows at least at idle power."""
    preset = presets.load("llama-2-7b-bf16-h200")
    probe = {"prompt": "what is 12 + 30", "max_tokens": 24, "temperature": 0}

    async def answers(others: int) -> list[str]:
        async with httpx.AsyncClient(timeout=20) as client:
            url = server.url + "/v1/completions"
            bodies = [probe] + [{**probe, "prompt": f"other prompt {i}"} for i in range(others)]
            replies = await asyncio.gather(*(client.post(url, json=b) for b in bodies))
            return [r.json()["choices"][0]["text"] for r in replies]

    with serve(preset=preset) as server:
        energy_before, started = server.metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), time.time()
        [alone] = asyncio.run(answers(0))
        batched = asyncio.run(answers(31))
        energy_after, ended = server.metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), time.time()
    assert alone and batched[0] == alone
    assert len(set(batched)) > len(batched) // 2  # other prompts, (mostly) other answers
    idle_mj = (ended - started) * preset.perf.hardware.idle_watts * 1000
    assert energy_after - energy_before >= 0.9 * idle_mj
