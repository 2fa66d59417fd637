"""Prefix caching as vLLM V1 does it: chained block hashes, LRU eviction, skipped prefill."""

from __future__ import annotations

import dataclasses

from loadgen.sim.model import presets
from loadgen.sim.model.prefix_cache import BlockPool, block_hashes
from loadgen.sim.model.scheduler import EngineConfig, Scheduler
from loadgen.sim.model.sequence import Seq

PRESET = presets.load("llama-70b-bf16-tp4-a100")
SIZE = 16


def prompt(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


def test_hashes_cover_full_blocks_and_chain_the_prefix() -> None:
    a = block_hashes(prompt(0, 40), SIZE)
    assert len(a) == 2  # 40 tokens: two full blocks, the last 8 tokens have no hash
    assert block_hashes(prompt(0, 47), SIZE) == a
    b = block_hashes([*prompt(0, 16), 999, *prompt(17, 23)], SIZE)
    assert b[0] == a[0] and b[1] != a[1]
    # the same block after another first block is another prefix: its hash differs
    shifted = block_hashes([999, *prompt(1, 15), *prompt(16, 16)], SIZE)
    assert shifted[1] != a[1]


def test_pool_evicts_the_least_recently_freed_cached_block() -> None:
    pool = BlockPool(4)
    h = block_hashes(prompt(0, 64), SIZE)
    first = pool.allocate(2)
    pool.cache(first, h[:2], 2)
    pool.release(first)
    assert pool.free == 4 and pool.lookup(h, 64, SIZE) == first
    second = pool.allocate(3)  # the two never-used blocks first, then the LRU one
    assert set(second) & set(first) == {first[1]}  # freed tail first: the tail goes first
    assert pool.lookup(h, 64, SIZE) == [first[0]]
    pool.take([first[0]])
    assert pool.free == 0
    pool.release([first[0]])
    assert pool.free == 1


def test_no_caching_no_hits() -> None:
    pool = BlockPool(4, caching=False)
    h = block_hashes(prompt(0, 32), SIZE)
    blocks = pool.allocate(2)
    pool.cache(blocks, h, 2)
    pool.release(blocks)
    assert pool.lookup(h, 32, SIZE) == []


def run(scheduler: Scheduler, seq: Seq) -> list[int]:
    """One sequence to its end on a virtual clock; the new tokens of each of its steps."""
    scheduler.add(seq)
    steps, clock = [], 0.0
    while not scheduler.idle:
        batch = scheduler.schedule(clock)
        steps.append(batch.tokens)
        clock += PRESET.perf.step_time(batch.tokens, batch.kv_tokens, batch.attention).total
        scheduler.complete(batch, clock)
    return steps


def test_a_repeated_prompt_skips_its_cached_blocks_prefill() -> None:
    scheduler = Scheduler(PRESET.engine, PRESET.kv_capacity_tokens)
    hashes = block_hashes(prompt(0, 1000), SIZE)
    first = run(scheduler, Seq(1000, 3, 0.0, block_hashes=hashes))
    again = run(scheduler, Seq(1000, 3, 0.0, block_hashes=hashes))
    assert first[0] == 1000
    assert again[0] == 1000 - 62 * SIZE  # 62 full blocks cached, the rest computed
    assert scheduler.prefix_cache_queries == 2000
    assert scheduler.prefix_cache_hits == 62 * SIZE
    assert scheduler.free_blocks == scheduler.total_blocks


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    scheduler = Scheduler(PRESET.engine, PRESET.kv_capacity_tokens)
    hashes = block_hashes(prompt(0, 64), SIZE)
    run(scheduler, Seq(64, 2, 0.0, block_hashes=hashes))
    assert run(scheduler, Seq(64, 2, 0.0, block_hashes=hashes))[0] == SIZE  # 3 blocks hit


def test_two_running_sequences_share_cached_blocks() -> None:
    scheduler = Scheduler(PRESET.engine, PRESET.kv_capacity_tokens)
    hashes = block_hashes(prompt(0, 320), SIZE)
    run(scheduler, Seq(320, 1, 0.0, block_hashes=hashes))
    a, b = Seq(320, 5, 0.0, block_hashes=hashes), Seq(320, 5, 0.0, block_hashes=hashes)
    scheduler.add(a)
    scheduler.add(b)
    scheduler.schedule(0.0)
    assert a.blocks[:19] == b.blocks[:19]  # the same 19 cached blocks, referenced twice
    assert scheduler.total_blocks - scheduler.free_blocks == 19 + 1 + 1  # + one each


def test_disabled_caching_prefills_everything_and_counts_no_hits() -> None:
    config = dataclasses.replace(PRESET.engine, enable_prefix_caching=False)
    scheduler = Scheduler(config, PRESET.kv_capacity_tokens)
    hashes = block_hashes(prompt(0, 1000), SIZE)
    run(scheduler, Seq(1000, 2, 0.0, block_hashes=hashes))
    assert run(scheduler, Seq(1000, 2, 0.0, block_hashes=hashes))[0] == 1000
    assert scheduler.prefix_cache_hits == 0


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_step() -> None:
    def second_step(chunked: bool) -> list[int]:
        config = EngineConfig(max_num_batched_tokens=2048, enable_chunked_prefill=chunked)
        scheduler = Scheduler(config, PRESET.kv_capacity_tokens)
        scheduler.add(Seq(10, 50, 0.0))
        scheduler.complete(scheduler.schedule(0.0), 0.1)  # decoding from now on
        scheduler.add(Seq(2048, 2, 0.1))
        return [n for _, n in scheduler.schedule(0.1).work]

    assert second_step(chunked=True) == [1, 2047]  # the budget's rest: a first chunk
    assert second_step(chunked=False) == [1]  # 2,048 do not fit beside the decode: it waits
