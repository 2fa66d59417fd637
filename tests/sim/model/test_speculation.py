"""Speculative decoding in the simulator: fewer, fuller decode steps priced by the
performance model, and vLLM's per-request speculative_decoding object (speculation.py)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest

from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from loadgen.sim import cli
from loadgen.sim.model import presets, speculation
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.serving import serving_from_flags

PRESET = "llama-2-7b-bf16-h200"
SPEC = '{"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}'
BODY = {
    "prompt": "hi there",
    "max_tokens": 64,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def final_chunk(*flags: str) -> tuple[dict[str, Any], Any]:
    """One streamed completion on the preset with these vLLM flags: its final usage chunk
    and the meter's figures."""
    args = cli.build_parser().parse_args(
        ["--preset", PRESET, "--enable-per-request-metrics", *flags]
    )
    preset, _ = apply_flags(presets.load(PRESET), args)

    async def go() -> str:
        app = create_app(preset, serving=serving_from_flags(args))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return (await client.post("/v1/completions", json=BODY, timeout=60)).text

    text = asyncio.run(go())
    parser, meter = SSEParser(), StreamMeter(0.0)
    for event in parser.feed(text.encode()):
        meter.on_event(0.0, event)
    finals = [
        json.loads(e[6:])
        for e in text.splitlines()
        if e.startswith("data: {") and '"choices":[]' in e
    ]
    return finals[-1], meter.finish(0.0)


def test_speculation_cuts_the_time_per_token_by_about_the_acceptance_length() -> None:
    plain, _ = final_chunk()
    spec, timing = final_chunk(
        "--speculative-config", SPEC, "--per-request-spec-decode-metrics", "summary"
    )
    stats = spec["metrics"]["speculative_decoding"]
    speedup = plain["metrics"]["mean_itl_ms"] / spec["metrics"]["mean_itl_ms"]
    # memory-bound decode: verifying 3 drafts costs little more than one token's step, so
    # the gap shrinks by about the acceptance length (never by more than 1 + 3 tokens a
    # step; a loaded host's late steps weigh on the plain run's 63 steps more)
    assert 0.8 * stats["mean_acceptance_length"] <= speedup <= 1.25 * 4
    assert timing.spec_acceptance_rate == stats["draft_acceptance_rate"]
    assert timing.spec_acceptance_length == stats["mean_acceptance_length"]


def test_the_speculative_decoding_object_is_vllms() -> None:
    spec, _ = final_chunk(
        "--speculative-config", SPEC, "--per-request-spec-decode-metrics", "summary"
    )
    stats = spec["metrics"]["speculative_decoding"]
    assert list(stats) == [
        "mean_acceptance_length",
        "draft_acceptance_rate",
        "acceptance_histogram",
        "num_spec_steps",
        "num_accepted_draft_tokens",
        "num_draft_tokens",
        "num_spec_tokens",
    ]
    histogram = stats["acceptance_histogram"]
    assert len(histogram) == 4 and sum(histogram) == stats["num_spec_steps"]
    assert stats["num_draft_tokens"] == 3 * stats["num_spec_steps"]
    accepted = sum(j * n for j, n in enumerate(histogram))
    assert stats["num_accepted_draft_tokens"] == accepted
    # the first token comes from the prefill; every verify step samples 1 + its accepted
    # drafts, the last one cut at max_tokens
    steps, tokens = stats["num_spec_steps"], 64 - 1
    assert steps + accepted >= tokens > steps + accepted - 4
    without, _ = final_chunk("--speculative-config", SPEC)
    assert "speculative_decoding" not in without["metrics"]  # not asked for


def test_acceptance_follows_the_rate() -> None:
    spec = speculation.Speculation(3, 0.7)
    rng = random.Random(1)
    mean = sum(1 + spec.accepted(rng) for _ in range(20000)) / 20000
    assert mean == pytest.approx(spec.mean_acceptance_length, rel=0.02)
    assert spec.mean_acceptance_length == pytest.approx((1 - 0.7**4) / 0.3)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ('{"method": "ngram"}', "num_speculative_tokens"),
        (
            '{"num_speculative_tokens": 3, "prompt_lookup_max": 4}',
            "cannot honour prompt_lookup_max",
        ),
        ('{"num_speculative_tokens": 0}', "≥ 1"),
        ('{"num_speculative_tokens": 2, "acceptance_rate": 1.5}', "acceptance_rate"),
    ],
)
def test_a_config_the_simulator_cannot_honour_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        speculation.parse(text)
