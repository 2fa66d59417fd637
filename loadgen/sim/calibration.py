"""The simulator against published measurements: the same setups replayed on a virtual clock.
Pure, no I/O: the engine's scheduler and performance model, stepped without waiting.

Qwen's speed benchmark (QwenLM/Qwen2.5, docs/source/benchmark/speed_benchmark.rst, the
"72B (vLLM)" table; its script examples/speed-benchmark/speed_benchmark_vllm.py):
Qwen2.5-72B-Instruct in BF16 on 4×A100-80GB, vLLM 0.6.3 through its offline `LLM` class,
batch 1, 2,048 output tokens; speed = 2,048 / the time of the whole `generate` call, prefill
included. Settings: gpu_memory_utilization 0.9 and max_model_len 32,768 ("Default"), or
65,536 for the 63,488-token input ("Setting 4"). vLLM 0.6.3 (V0) then ran without prefix
caching and, at 32,768, without chunked prefill (so one step of max(max_model_len, 2048)
tokens takes the whole prompt); above 32K it turned chunked prefill on by itself with a
512-token budget (vLLM PR #6666; the default became 2,048 only in PR #10544, after 0.6.3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.sim import presets
from loadgen.sim.presets import Preset
from loadgen.sim.scheduler import EngineConfig, Scheduler
from loadgen.sim.sequence import Seq

TOLERANCE = 0.10  # the simulator must land within 10% of every published point
QWEN_SOURCE = (
    "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst, 72B (vLLM), BF16, 4 GPUs"
)
QWEN_OUTPUT_TOKENS = 2048
QWEN_SPEED = {1: 31.37, 6144: 29.90, 14336: 30.10, 30720: 27.53, 63488: 20.74}  # tokens/s


@dataclass(frozen=True, slots=True)
class Point:
    setup: str
    published: float
    simulated: float
    unit: str

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1


def replay(preset: Preset, seqs: Iterable[Seq]) -> list[Seq]:
    """Run `seqs` (arrival times set) through the preset's engine on a virtual clock, as
    engine.py does in real time; returns them finished."""
    seqs = sorted(seqs, key=lambda s: s.arrival)
    pending = list(reversed(seqs))
    scheduler = Scheduler(preset.engine, preset.kv_capacity_tokens)
    clock = 0.0
    while pending or not scheduler.idle:
        if scheduler.idle:
            clock = max(clock, pending[-1].arrival)
        while pending and pending[-1].arrival <= clock:
            scheduler.add(pending.pop())
        batch = scheduler.schedule(clock)
        clock += preset.perf.step_time(batch.tokens, batch.kv_tokens, batch.attention).total
        scheduler.complete(batch, clock)
    return seqs


def vllm_063_offline(preset: Preset, max_model_len: int) -> Preset:
    """The preset as vLLM 0.6.3's `LLM(...)` configured itself for this max_model_len."""
    chunked = max_model_len > 32768
    engine = EngineConfig(
        max_num_seqs=256,
        max_num_batched_tokens=512 if chunked else max(max_model_len, 2048),
        gpu_memory_utilization=0.9,
        block_size=16,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=False,
    )
    model = dataclasses.replace(preset.perf.model, max_model_len=max_model_len)
    perf = dataclasses.replace(preset.perf, model=model)
    return dataclasses.replace(preset, perf=perf, engine=engine)


def qwen_speed(base: Preset | None = None) -> list[Point]:
    """Qwen's batch-1 speed by input length, published against simulated (by default with
    the preset qwen-72b-bf16-tp4-a100)."""
    base = base or presets.load("qwen-72b-bf16-tp4-a100")
    points = []
    for prompt, published in QWEN_SPEED.items():
        preset = vllm_063_offline(base, 65536 if prompt > 32768 else 32768)
        [seq] = replay(preset, [Seq(prompt, QWEN_OUTPUT_TOKENS, 0.0)])
        assert seq.finished_at is not None
        speed = QWEN_OUTPUT_TOKENS / seq.finished_at
        points.append(Point(f"{prompt:,} input tokens, batch 1", published, speed, "tokens/s"))
    return points
