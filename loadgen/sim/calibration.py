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

lmdeploy's static inference benchmark (InternLM/lmdeploy, docs/en/benchmark/a100_fp16.md as
first published, commit ebe90bc94, lmdeploy v0.1.0a1: table "llama2-70b", lines 97-118; the
script benchmark/profile_generation.py of that commit, whose defaults, concurrency 1 16 32 64
and 6 test rounds, are the table's rows): Llama-2-70B in fp16 on 4×A100-80GB (tp 4), served
by TurboMind, lmdeploy's own engine, not vLLM. `concurrency` threads each send 6 identical
requests one after another (ignore_eos, fixed prompt and output lengths); FTL is the mean
time to first token over all requests, the per-token latency's 50th percentile is over every
gap after the first token, throughput is all output tokens over the run's time. The replay
serves the same closed loop with the preset's own engine (vLLM's scheduler) and no prefix
cache (TurboMind 0.1.0 had none, and the benchmark's prompt is the same for every request).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from loadgen.sim import presets
from loadgen.sim.presets import Preset
from loadgen.sim.scheduler import EngineConfig, Scheduler
from loadgen.sim.sequence import Seq

TOLERANCE = 0.10  # the simulator must land within 10% of every Qwen point (and see below)
QWEN_SOURCE = "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst, 72B (vLLM), BF16, 4 GPUs"
QWEN_OUTPUT_TOKENS = 2048
QWEN_SPEED = {1: 31.37, 6144: 29.90, 14336: 30.10, 30720: 27.53, 63488: 20.74}  # tokens/s

# Under concurrent load, against another engine: TPOT must land within TOLERANCE up to 16
# clients and within LOADED_TOLERANCE at 32 and 64, where the simulator is known to be
# faster than TurboMind (its KV reads and per-sequence work at large batch, see README).
LOADED_TOLERANCE = 0.20
LMDEPLOY_SOURCE = (
    "InternLM/lmdeploy docs/en/benchmark/a100_fp16.md (commit ebe90bc94, v0.1.0a1), "
    "llama2-70b static inference, TurboMind, fp16, tp 4, A100-80G"
)
LMDEPLOY_ROUNDS = 6  # profile_generation.py's --test-round default: requests per thread
# (concurrency, prompt tokens, output tokens): (out tok/s, FTL ave s, per-token 50% s)
LMDEPLOY_LLAMA2_70B = {
    (1, 128, 2048): (32.38, 0.074, 0.031),
    (16, 128, 2048): (482.99, 0.403, 0.033),
    (32, 128, 2048): (853.56, 0.732, 0.036),
    (64, 128, 2048): (1391.8, 1.173, 0.043),
    (1, 2048, 2048): (31.9, 0.405, 0.031),
    (16, 2048, 2048): (399.42, 5.773, 0.036),
    (32, 2048, 2048): (636.23, 11.711, 0.043),
    (64, 2048, 2048): (930.46, 21.29, 0.055),
}


@dataclass(frozen=True, slots=True)
class Point:
    setup: str
    published: float
    simulated: float
    unit: str

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1


@dataclass(frozen=True, slots=True)
class Load:
    """One published row under concurrent load, each of its figures against the simulator's."""

    concurrency: int
    ttft: Point  # mean
    tpot: Point  # 50th percentile of the gaps after the first token
    throughput: Point  # output tokens/s


@dataclass(slots=True)
class Trace:
    finished: list[Seq] = field(default_factory=list)  # in the order they finished
    gaps: list[float] = field(default_factory=list)  # every inter-token gap, seconds
    elapsed: float = 0.0  # virtual seconds from 0 to the last step's end


def replay(
    preset: Preset,
    seqs: Iterable[Seq],
    follow_up: Callable[[Seq, float], Seq | None] = lambda seq, now: None,
) -> Trace:
    """Run `seqs` (arrival times set) through the preset's engine on a virtual clock, as
    engine.py does in real time. `follow_up(seq, now)` is told of each finished request and
    may return the next one, arriving `now` (a client in a closed loop)."""
    pending = sorted(seqs, key=lambda s: s.arrival, reverse=True)
    scheduler = Scheduler(preset.engine, preset.kv_capacity_tokens)
    trace = Trace()
    clock = 0.0
    while pending or not scheduler.idle:
        if scheduler.idle:
            clock = max(clock, pending[-1].arrival)
        while pending and pending[-1].arrival <= clock:
            scheduler.add(pending.pop())
        batch = scheduler.schedule(clock)
        clock += preset.perf.step_time(batch.tokens, batch.kv_tokens, batch.attention).total
        for seq, gap in scheduler.complete(batch, clock):
            if gap is not None:
                trace.gaps.append(gap)
            if seq.finished:
                trace.finished.append(seq)
                nxt = follow_up(seq, clock)
                if nxt is not None:
                    scheduler.add(nxt)
    trace.elapsed = clock
    return trace


def closed_loop(preset: Preset, clients: int, rounds: int, prompt: int, output: int) -> Trace:
    """`clients` clients that each send `rounds` requests, the next as the last finishes."""
    left: dict[Seq, int] = {Seq(prompt, output, 0.0): rounds - 1 for _ in range(clients)}

    def follow_up(done: Seq, now: float) -> Seq | None:
        rest = left.pop(done)
        if not rest:
            return None
        seq = Seq(prompt, output, now)
        left[seq] = rest - 1
        return seq

    return replay(preset, list(left), follow_up)


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
        [seq] = replay(preset, [Seq(prompt, QWEN_OUTPUT_TOKENS, 0.0)]).finished
        assert seq.finished_at is not None
        speed = QWEN_OUTPUT_TOKENS / seq.finished_at
        points.append(Point(f"{prompt:,} input tokens, batch 1", published, speed, "tokens/s"))
    return points


def lmdeploy_llama2_70b(base: Preset | None = None) -> list[Load]:
    """lmdeploy's Llama-2-70B rows by concurrency, published against simulated (by default
    with the preset llama-2-70b-fp16-tp4-a100)."""
    base = base or presets.load("llama-2-70b-fp16-tp4-a100")
    preset = dataclasses.replace(
        base, engine=dataclasses.replace(base.engine, enable_prefix_caching=False)
    )
    loads = []
    for (clients, prompt, output), (speed, ttft, tpot) in LMDEPLOY_LLAMA2_70B.items():
        trace = closed_loop(preset, clients, LMDEPLOY_ROUNDS, prompt, output)
        first = [s.first_token_at - s.arrival for s in trace.finished if s.first_token_at]
        gaps = sorted(trace.gaps)
        setup = f"{clients} clients, {prompt:,} in / {output:,} out"
        loads.append(
            Load(
                clients,
                Point(setup, ttft, sum(first) / len(first), "s TTFT mean"),
                Point(setup, tpot, gaps[len(gaps) // 2], "s TPOT p50"),
                Point(setup, speed, len(trace.finished) * output / trace.elapsed, "out tok/s"),
            )
        )
    return loads
