"""Speculative decoding with a draft model: its passes cost time and its weights and KV cache
cost memory (scheduler.Batch.step, model.PerfModel.draft_time, presets.Preset)."""

from __future__ import annotations

import statistics

import pytest

from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.vllm_flags.table import parse_text

TARGET = "llama-70b-awq-tp4-a100"
DRAFT = (
    '{"method": "draft_model", "model": "llama-3-8b-awq-a100", "num_speculative_tokens": 5, '
    '"acceptance_rate": 0.75}'
)
NGRAM = '{"method": "ngram", "num_speculative_tokens": 5, "acceptance_rate": 0.75}'


def preset(flags: str) -> Preset:
    applied, _warnings = apply_flags(presets.load(TARGET), parse_text(flags))
    return applied


def test_a_draft_model_runs_k_passes_after_each_forward() -> None:
    drafted = preset(f"--speculative-config '{DRAFT}'")
    spec = drafted.engine.speculation
    assert spec is not None and spec.draft is not None
    assert spec.draft == presets.load("llama-3-8b-awq-a100").perf.model
    perf = drafted.perf
    batch = Batch([], tokens=6, kv_tokens=1030, attention=6 * 1030, speculation=spec)
    batch.drafts, batch.drafting, batch.drafting_context = 5, 1, 1030
    step = batch.step(perf)
    # five memory-bound passes of the draft, each streaming its weights once and paying its
    # own all-reduces (two per layer)
    hw = perf.hardware
    one_pass = spec.draft.weight_bytes / 4 / (hw.hbm_bandwidth * perf.efficiency.mbu)
    one_pass += 2 * spec.draft.layers * hw.allreduce_latency
    assert 5 * one_pass < step.draft < 5 * one_pass * 1.2
    assert step.total == pytest.approx(perf.step_time(6, 1030, 6 * 1030, 0).total + step.draft)
    ngram = Batch([], tokens=6, kv_tokens=1030, attention=6 * 1030)
    assert ngram.step(preset(f"--speculative-config '{NGRAM}'").perf).draft == 0


def test_the_draft_takes_gpu_memory_from_the_kv_cache() -> None:
    plain, drafted = preset(""), preset(f"--speculative-config '{DRAFT}'")
    draft = presets.load("llama-3-8b-awq-a100").perf.model
    budget = plain.perf.hardware.gpu_memory * plain.engine.gpu_memory_utilization
    free = budget - plain.perf.weight_bytes_per_gpu - draft.weight_bytes / 4
    per_token = plain.perf.kv_bytes_per_token_per_gpu + plain.perf.kv_per_gpu(draft)
    assert drafted.kv_capacity_tokens == int(free // per_token) < plain.kv_capacity_tokens


def test_a_bf16_70b_with_a_draft_does_not_fit_two_a100s() -> None:
    """141 GB of weights on 2×80 GiB: at --gpu-memory-utilization 0.85 2.4 GB a GPU are
    left, and an int4 8B draft's 2.2 GB leaves too little for one 2,048-token request."""
    flags = "--tensor-parallel-size 2 --max-model-len 2048 --gpu-memory-utilization 0.85"
    bf16 = presets.load("llama-70b-bf16-tp4-a100")
    alone, _ = apply_flags(bf16, parse_text(flags))
    assert 2048 < alone.kv_capacity_tokens < 20_000  # the weights alone fit, barely
    with pytest.raises(ValueError, match=r"larger than the available KV cache memory"):
        apply_flags(bf16, parse_text(f"{flags} --speculative-config '{DRAFT}'"))


def tpot(model: Preset) -> float:
    """Median TPOT of requests served one at a time (no batching)."""
    requests = [twin.Request(30.0 * i, 512, 128) for i in range(8)]
    return statistics.median(t.tpot for t in twin.run(model, requests, 1, 0).timings)


def test_a_draft_models_cost_eats_into_what_speculation_saves() -> None:
    plain = tpot(preset(""))
    free = tpot(preset(f"--speculative-config '{NGRAM}'"))
    drafted = tpot(preset(f"--speculative-config '{DRAFT}'"))
    # a free drafter divides TPOT by about the mean acceptance length, 3.3 tokens a step
    assert plain / free == pytest.approx((1 - 0.75**6) / 0.25, rel=0.2)
    assert free * 1.5 < drafted < plain


@pytest.mark.parametrize(
    "config, message",
    [
        ('{"method": "draft_model", "num_speculative_tokens": 3}', 'needs "model"'),
        (
            '{"method": "draft_model", "model": "Qwen/Qwen-7B", "num_speculative_tokens": 3}',
            "draft \"model\" 'Qwen/Qwen-7B'.*bundled preset or a preset file",
        ),
    ],
)
def test_a_draft_the_simulator_cannot_size_is_refused(config: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preset(f"--speculative-config '{config}'")
