"""The simulator's serving flags answer in vLLM 0.32's shapes (loadgen/sim/wire/serving.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from loadgen.sim import cli
from loadgen.sim.model.sequence import Seq
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.serving import Serving, serving_from_flags, timing_metrics

CHAT = {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 8}
STREAM = {"stream": True, "stream_options": {"include_usage": True}}


def post(serving: Serving, path: str, body: dict[str, Any], **app: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        application = create_app(ttft=0.0, itl=0.0, serving=serving, **app)
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return await client.post(path, json=body)

    return asyncio.run(go())


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")
    ]


def test_a_reasoning_parser_streams_reasoning_before_the_answer() -> None:
    script = {"tokens": 8, "reasoning_tokens": 5}
    r = post(Serving("deepseek_r1"), "/v1/chat/completions", {**CHAT, **STREAM}, script=script)
    chunks = events(r)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]][1:]  # after the role
    assert [list(d) for d in deltas] == [["reasoning"]] * 5 + [["content"]] * 3
    final = chunks[-1]
    assert final["usage"]["completion_tokens"] == 8
    assert final["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    assert "prompt_tokens_details" not in final["usage"] and "metrics" not in final


def test_without_a_parser_chat_usage_has_no_reasoning_details() -> None:
    r = post(Serving(), "/v1/chat/completions", {**CHAT, **STREAM})
    final = events(r)[-1]
    assert "completion_tokens_details" not in final["usage"]
    assert all("reasoning" not in c["choices"][0]["delta"] for c in events(r) if c["choices"])


def test_the_reasoning_length_is_drawn_per_prompt_and_counts_against_max_tokens() -> None:
    serving = Serving("qwen3", reasoning_tokens=100)
    lengths = {serving.reasoning_length(str(i), True, None) for i in range(50)}
    assert min(lengths) >= 50 and max(lengths) <= 150 and len(lengths) > 10
    assert serving.reasoning_length("7", True, None) == serving.reasoning_length("7", True, None)
    assert serving.reasoning_length("7", False, None) == 0  # completions are not parsed
    r = post(serving, "/v1/chat/completions", {**CHAT, "max_tokens": 20})
    body = r.json()
    assert body["usage"]["completion_tokens"] == 20  # all of it spent thinking
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 20
    assert (
        body["choices"][0]["message"]["reasoning"]
        and body["choices"][0]["finish_reason"] == "length"
    )


def test_prompt_tokens_details_and_metrics_in_vllms_shapes() -> None:
    serving = Serving(prompt_tokens_details=True, per_request_metrics=True)
    chat = events(post(serving, "/v1/chat/completions", {**CHAT, **STREAM}))[-1]
    assert list(chat["usage"]["prompt_tokens_details"]) == ["cached_tokens", "created_cache_tokens"]
    assert list(chat["metrics"]) == [
        "time_to_first_token_ms",
        "generation_time_ms",
        "queue_time_ms",
        "mean_itl_ms",
        "tokens_per_second",
    ]
    assert list(chat)[-2:] == ["system_fingerprint", "metrics"]
    body = {"prompt": "hi", "max_tokens": 4, **STREAM}
    completion = events(post(serving, "/v1/completions", body))[-1]
    assert completion["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    whole = post(serving, "/v1/completions", {"prompt": "hi", "max_tokens": 4}).json()
    assert whole["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "created_cache_tokens": None,
        "multimodal_tokens": None,
    }
    assert whole["metrics"]["speculative_decoding"] is None


def test_timing_metrics_are_vllms_arithmetic_on_the_request_clock() -> None:
    seq = Seq(10, 10, arrival=1.0)
    seq.scheduled_at, seq.first_token_at, seq.last_token_at, seq.generated = 1.5, 2.0, 3.0, 10
    seq.queued_at = 1.2  # taken in when the step in flight ended
    metrics = timing_metrics(seq)
    assert metrics["queue_time_ms"] == pytest.approx(300.0)
    assert metrics["time_to_first_token_ms"] == pytest.approx(500.0)
    assert metrics["generation_time_ms"] == pytest.approx(1000.0)
    assert metrics["mean_itl_ms"] == pytest.approx(1000.0 / 9)
    assert metrics["tokens_per_second"] == pytest.approx(10 / 1.5)


def test_an_unknown_reasoning_parser_is_refused_as_vllm_refuses_it() -> None:
    with pytest.raises(ValueError, match="invalid reasoning parser: nope"):
        Serving("nope")


def test_the_flags_on_the_command_line() -> None:
    args = cli.build_parser().parse_args(
        ["--ttft", "0", "--itl", "0", "--reasoning-parser", "qwen3", "--reasoning-tokens", "64",
         "--enable-prompt-tokens-details", "--enable-per-request-metrics"]
    )  # fmt: skip
    assert serving_from_flags(args) == Serving("qwen3", 64, True, True)
