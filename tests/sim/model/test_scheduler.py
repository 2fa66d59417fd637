"""Continuous batching on a virtual clock: queueing, batching, chunked prefill, preemption."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from loadgen.sim.model import presets
from loadgen.sim.model.roofline import PerfModel
from loadgen.sim.model.scheduler import EngineConfig, Scheduler
from loadgen.sim.model.sequence import Seq

PRESET = presets.load("llama-2-70b-fp16-tp4-a100")


def simulate(
    arrivals: list[tuple[float, int, int]],
    perf: PerfModel = PRESET.perf,
    config: EngineConfig = PRESET.engine,
    kv_tokens: int | None = None,
) -> tuple[list[Seq], Scheduler]:
    """Drive the scheduler with the performance model on a virtual clock, like the engine
    does in real time. arrivals: (time, prompt tokens, output tokens)."""
    capacity = (
        kv_tokens
        if kv_tokens is not None
        else perf.kv_capacity_tokens(config.gpu_memory_utilization)
    )
    scheduler = Scheduler(config, capacity)
    seqs = [Seq(prompt, output, at) for at, prompt, output in arrivals]
    pending = sorted(seqs, key=lambda s: s.arrival)
    clock = 0.0
    while pending or not scheduler.idle:
        if scheduler.idle:
            clock = max(clock, pending[0].arrival)
        while pending and pending[0].arrival <= clock:
            scheduler.add(pending.pop(0))
        batch = scheduler.schedule(clock)
        assert batch.work, "no progress"
        assert batch.tokens <= config.max_num_batched_tokens
        assert len(scheduler.running) <= config.max_num_seqs
        clock += perf.step_time(batch.tokens, batch.kv_tokens).total
        scheduler.complete(batch, clock)
    return seqs, scheduler


def ttft(seq: Seq) -> float:
    assert seq.first_token_at is not None
    return seq.first_token_at - seq.arrival


def tpot(seq: Seq) -> float:
    assert seq.finished_at is not None and seq.first_token_at is not None
    return (seq.finished_at - seq.first_token_at) / (seq.generated - 1)


def test_a_lone_request_costs_one_prefill_then_one_decode_step_per_token() -> None:
    [seq], scheduler = simulate([(0.0, 512, 100)])
    perf = PRESET.perf
    assert ttft(seq) == pytest.approx(perf.step_time(512, 512).total)
    assert tpot(seq) == pytest.approx(perf.step_time(1, 600).total, rel=0.02)
    assert seq.generated == 100 and seq.finished_at is not None
    assert scheduler.free_blocks == scheduler.total_blocks  # everything given back


def test_tpot_grows_with_batch_size_sublinearly() -> None:
    tpots = {}
    for batch in (1, 16, 64, 256):
        seqs, _ = simulate([(0.0, 128, 200)] * batch)
        tpots[batch] = statistics.median(tpot(s) for s in seqs)
    assert tpots[1] < tpots[16] < tpots[64] < tpots[256]
    assert tpots[256] < 8 * tpots[1]  # 256× the batch, far less than 256× the latency
    throughput = {b: b / t for b, t in tpots.items()}
    assert throughput[256] > 30 * throughput[1]


def test_ttft_grows_with_queueing() -> None:
    burst = [(0.0, 2000, 50)] * 40  # 80k prompt tokens: ~40 prefill steps of 2,048
    seqs, _ = simulate(burst)
    ttfts = sorted(ttft(s) for s in seqs)
    first = PRESET.perf.step_time(2000, 2000).total
    assert ttfts[0] == pytest.approx(first, rel=0.1)
    assert ttfts[-1] > 20 * ttfts[0]
    queue = [s.scheduled_at - s.arrival for s in seqs]
    assert max(queue) > 0 and min(queue) == 0


def test_chunked_prefill_splits_a_long_prompt_and_keeps_decodes_going() -> None:
    config = dataclasses.replace(PRESET.engine, max_num_batched_tokens=512)
    seqs, _ = simulate([(0.0, 16, 400), (0.5, 4000, 10)], config=config)
    decoder, long_prompt = seqs
    perf = PRESET.perf
    # 4,000 tokens in chunks of ≤ 511 next to the running decode: 8 steps, not one
    assert ttft(long_prompt) > 7 * perf.step_time(511, 511).total
    assert decoder.finished_at is not None and decoder.generated == 400
    # the decode kept going through the prefill, one token per (slower) mixed step
    assert tpot(decoder) < 2 * perf.step_time(1, 400).total


def test_v0_without_chunked_prefill_runs_prompts_alone_and_stalls_the_decodes() -> None:
    whole = dataclasses.replace(PRESET.engine, enable_chunked_prefill=False)
    prompt = [(0.0, 16, 400), (0.5, 1500, 10), (0.5, 1500, 10)]
    mixed, _ = simulate(prompt, config=whole)
    v0, _ = simulate(prompt, config=dataclasses.replace(whole, scheduler="v0"))
    scheduler = Scheduler(dataclasses.replace(whole, scheduler="v0"), 100_000)
    decoding, late = Seq(16, 400, 0.0), Seq(1500, 10, 0.0)
    scheduler.add(decoding)
    scheduler.complete(scheduler.schedule(0.0), 0.01)
    scheduler.add(late)
    step = scheduler.schedule(0.01)
    # the waiting prompt gets a step of its own: the running sequence sits it out
    assert [seq for seq, _ in step.work] == [late] and step.tokens == 1500
    scheduler.complete(step, 0.2)
    assert [seq for seq, _ in scheduler.schedule(0.2).work] == [decoding, late]
    # two prompts over the 2,048-token budget: a step each, in which the running request
    # gets no token, where it rode along in both (V1, or V0 with chunked prefill)
    first_token = [ttft(s) for s in v0[1:]]
    assert first_token == pytest.approx([ttft(s) for s in mixed[1:]], rel=0.05)
    stalled = v0[0].finished_at - mixed[0].finished_at  # type: ignore[operator]
    assert stalled == pytest.approx(2 * PRESET.perf.step_time(1, 400).total, rel=0.1)
    chunked = dataclasses.replace(PRESET.engine, scheduler="v0")
    same, _ = simulate(prompt, config=chunked)
    assert [s.finished_at for s in same] == [s.finished_at for s in simulate(prompt)[0]]


def test_max_num_seqs_caps_the_batch() -> None:
    config = dataclasses.replace(PRESET.engine, max_num_seqs=4)
    seqs, _ = simulate([(0.0, 10, 20)] * 8, config=config)
    firsts = sorted(s.scheduled_at for s in seqs)
    assert firsts[:4] == [0.0] * 4
    assert min(firsts[4:]) > 0  # the second four waited for slots


def test_a_full_kv_cache_preempts_and_the_victims_recompute() -> None:
    # 16 sequences of 100 + 200 tokens need 16 × 300 = 4,800 tokens of cache; give 2,000
    seqs, scheduler = simulate([(0.0, 100, 200)] * 16, kv_tokens=2000)
    assert scheduler.preemptions > 0
    assert all(s.generated == 200 and s.finished_at is not None for s in seqs)
    assert any(s.preemptions for s in seqs)
    assert scheduler.free_blocks == scheduler.total_blocks


def test_abort_frees_the_slot_and_the_cache() -> None:
    scheduler = Scheduler(PRESET.engine, 100_000)
    a, b = Seq(300, 50, 0.0), Seq(300, 50, 0.0)
    scheduler.add(a)
    scheduler.add(b)
    batch = scheduler.schedule(0.0)
    assert scheduler.free_blocks < scheduler.total_blocks
    scheduler.abort(a)
    scheduler.complete(batch, 0.1)  # the step in flight ends after the abort
    assert a.generated == 0 and b.generated == 1
    assert scheduler.running == [b]
    scheduler.abort(b)
    assert scheduler.idle and scheduler.free_blocks == scheduler.total_blocks
    assert scheduler.kv_usage == 0
