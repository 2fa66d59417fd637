"""A stride schedules exactly what the scheduler's full pass would: the same work, totals,
KV blocks and cached hashes, step for step, whatever arrives, fills the cache or leaves,
under every scheduler the engine models."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from loadgen.sim.model.prefix_cache import block_hashes
from loadgen.sim.model.scheduler import Batch, EngineConfig, Scheduler
from loadgen.sim.model.sequence import Seq
from loadgen.sim.model.speculation import Speculation
from loadgen.sim.model.stride import Stride


class FullPass(Scheduler):
    """The reference: every step scheduled by visiting every sequence."""

    def _stride_on(self, stride: Stride) -> Batch | None:
        return None


class Counted(Scheduler):
    """The scheduler as it runs, counting the steps a stride scheduled."""

    strode = 0

    def _stride_on(self, stride: Stride) -> Batch | None:
        batch = super()._stride_on(stride)
        self.strode += batch is not None
        return batch


def requests(
    rng: random.Random, n: int, block: int, longest: int, span: int
) -> list[tuple[int, int, int, tuple]]:
    """(arrival step, prompt, output, block hashes): some share a prefix, some are long."""
    shared = [rng.randrange(50) for _ in range(4 * block)]
    out = []
    for i in range(n):
        prompt = min(longest, rng.choice([rng.randint(1, 40), rng.randint(40, 300)]))
        tokens = (shared if i % 3 == 0 else [])[:prompt]
        tokens += [rng.randrange(50) for _ in range(prompt - len(tokens))]
        answer = [rng.randrange(50) for _ in range(rng.randint(1, 120))]
        hashes = block_hashes(tokens + answer, block)
        out.append((rng.randrange(span), prompt, len(answer), hashes))
    return sorted(out, key=lambda r: r[0])


def signature(batch: Batch) -> tuple:
    work = tuple((seq.index, n, tuple(seq.blocks), seq.hashed_blocks) for seq, n in batch.work)
    return work, batch.tokens, batch.kv_tokens, batch.attention


@dataclass(frozen=True)
class Case:
    flags: dict[str, Any]  # the engine's, beside a budget of 256 tokens and blocks of 16
    capacity: int = 100_000  # KV-cache tokens
    longest: int = 300  # prompt
    span: int = 400  # steps the requests arrive over
    strides: float = 0.1  # the least share of steps a stride schedules


V0 = {"scheduler": "v0", "enable_chunked_prefill": False}
CASES = {
    "room for all: long strides": Case({}),
    "a tight cache: strides end where a block runs short": Case({}, capacity=1_500),
    "every slot taken while requests wait": Case({"max_num_seqs": 6}),
    "a block every token, no prefix cache": Case(
        {"block_size": 1, "max_num_seqs": 8, "enable_prefix_caching": False}, capacity=3_000
    ),
    "blocks of 8": Case({"block_size": 8}, capacity=2_000),
    # strides only while no more run than the five tokens
    "a budget of five tokens": Case({"max_num_batched_tokens": 5}, strides=0.001),
    "v0 with prompts alone": Case({**V0, "max_num_batched_tokens": 512}),
    # whole prompts admitted while the budget lasts, step after step: more run than it holds
    "v0, more running than the budget": Case(
        {**V0, "max_num_batched_tokens": 16}, longest=8, span=20, strides=0.01
    ),
    # which drafts a step accepts is drawn per sequence: never
    "speculation": Case({"speculation": Speculation(3, 0.6)}, strides=0.0),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_stride_schedules_what_the_full_pass_would(case: str, seed: int) -> None:
    this = CASES[case]
    config = EngineConfig(**{"max_num_batched_tokens": 256, "block_size": 16, **this.flags})
    engines = [Counted(config, this.capacity, seed), FullPass(config, this.capacity, seed)]
    rng = random.Random(seed)
    arrivals = requests(rng, 60, config.block_size, this.longest, this.span)
    seqs: list[list[Seq]] = [[], []]
    states: list[list[tuple]] = []  # what each engine's steps sampled, in turn
    step = 0
    while step < 2_000 and (arrivals or not all(e.idle for e in engines)):
        while arrivals and arrivals[0][0] <= step:
            _, prompt, output, hashes = arrivals.pop(0)
            interval = 1 + len(seqs[0]) % 3  # streamed every 1, 2 or 3 tokens
            for engine, mine in zip(engines, seqs, strict=True):
                seq = Seq(prompt, output, float(step), interval, block_hashes=hashes)
                seq.index = len(mine)
                mine.append(seq)
                engine.add(seq)
        if step % 97 == 50 and seqs[0]:  # a client leaves now and then
            leaving = rng.randrange(len(seqs[0]))
            for engine, mine in zip(engines, seqs, strict=True):
                if not mine[leaving].finished:
                    engine.abort(mine[leaving])
        if not engines[0].idle:
            batches = [engine.schedule(float(step)) for engine in engines]
            assert signature(batches[0]) == signature(batches[1]), step
            if step % 89 == 30 and batches[0].work:  # one leaves during the step
                leaving = rng.randrange(len(batches[0].work))
                for engine, batch in zip(engines, batches, strict=True):
                    engine.abort(batch.work[leaving][0])
            for engine, batch in zip(engines, batches, strict=True):
                sampled = engine.complete(batch, step + 1.0)
                states.append([(s.index, gap, s.released, s.generated) for s, gap in sampled])
            assert states[-2] == states[-1], step
        step += 1
    assert all(e.idle for e in engines)
    assert engines[0].preemptions == engines[1].preemptions
    finished = [[(s.generated, s.first_token_at, s.finished_at) for s in mine] for mine in seqs]
    assert finished[0] == finished[1]
    assert engines[0].blocks._cached == engines[1].blocks._cached
    assert list(engines[0].blocks._free) == list(engines[1].blocks._free)
    if this.strides:  # the stride ran: the comparison means something
        assert engines[0].strode > this.strides * step
    else:
        assert engines[0].strode == 0
