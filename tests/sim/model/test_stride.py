"""A stride schedules exactly what the scheduler's full pass would: the same work, totals,
KV blocks and cached hashes, step for step, whatever arrives, fills the cache or leaves."""

from __future__ import annotations

import random

import pytest

from loadgen.sim.model.prefix_cache import block_hashes
from loadgen.sim.model.scheduler import Batch, EngineConfig, Scheduler
from loadgen.sim.model.sequence import Seq


class FullPass(Scheduler):
    """The reference: every step scheduled by visiting every sequence."""

    def _stride_on(self) -> Batch | None:
        return None


class Counted(Scheduler):
    """The scheduler as it runs, counting the steps a stride scheduled."""

    strode = 0

    def _stride_on(self) -> Batch | None:
        batch = super()._stride_on()
        self.strode += batch is not None
        return batch


def requests(rng: random.Random, n: int, block: int) -> list[tuple[int, int, int, tuple]]:
    """(arrival step, prompt, output, block hashes): some share a prefix, some are long."""
    shared = [rng.randrange(50) for _ in range(4 * block)]
    out = []
    for i in range(n):
        prompt = rng.choice([rng.randint(1, 40), rng.randint(40, 300)])
        tokens = (shared if i % 3 == 0 else [])[:prompt]
        tokens += [rng.randrange(50) for _ in range(prompt - len(tokens))]
        answer = [rng.randrange(50) for _ in range(rng.randint(1, 120))]
        hashes = block_hashes(tokens + answer, block)
        out.append((rng.randrange(400), prompt, len(answer), hashes))
    return sorted(out, key=lambda r: r[0])


def signature(batch: Batch) -> tuple:
    work = tuple((seq.index, n, tuple(seq.blocks), seq.hashed_blocks) for seq, n in batch.work)
    return work, batch.tokens, batch.kv_tokens, batch.attention


@pytest.mark.parametrize(
    ("block", "capacity", "max_seqs", "caching"),
    [
        (16, 100_000, 256, True),  # room for all: long strides
        (16, 1_500, 256, True),  # a tight cache: strides end where a block runs short
        (16, 100_000, 6, True),  # every slot taken while requests wait
        (1, 3_000, 8, False),  # a block every token, no prefix cache
        (8, 2_000, 256, True),
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_stride_schedules_what_the_full_pass_would(
    block: int, capacity: int, max_seqs: int, caching: bool, seed: int
) -> None:
    config = EngineConfig(
        max_num_seqs=max_seqs, max_num_batched_tokens=256, block_size=block,
        enable_prefix_caching=caching,
    )  # fmt: skip
    engines = [Counted(config, capacity), FullPass(config, capacity)]
    rng = random.Random(seed)
    arrivals = requests(rng, 60, block)
    seqs: list[list[Seq]] = [[], []]
    step = 0
    while step < 2_000 and (arrivals or not all(e.idle for e in engines)):
        while arrivals and arrivals[0][0] <= step:
            _, prompt, output, hashes = arrivals.pop(0)
            for engine, mine in zip(engines, seqs, strict=True):
                seq = Seq(prompt, output, float(step), block_hashes=hashes)
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
            for engine, batch in zip(engines, batches, strict=True):
                engine.complete(batch, step + 1.0)
        step += 1
    assert all(e.idle for e in engines)
    assert engines[0].preemptions == engines[1].preemptions
    finished = [[(s.generated, s.first_token_at, s.finished_at) for s in mine] for mine in seqs]
    assert finished[0] == finished[1]
    assert engines[0].blocks._cached == engines[1].blocks._cached
    assert list(engines[0].blocks._free) == list(engines[1].blocks._free)
    assert engines[0].strode > step / 10  # the stride ran: the comparison means something
