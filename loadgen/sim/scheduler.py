"""Continuous batching as vLLM's V1 scheduler does it, without the clock. Pure, no I/O.

Every step has a token budget (max_num_batched_tokens). Running sequences come first: a
decoding sequence needs one token, a sequence still in prefill takes what is left of the
budget (chunked prefill). Waiting sequences are admitted in arrival order while there is
budget, a free slot (max_num_seqs) and KV-cache blocks for their first chunk. When the cache
cannot hold a running sequence's next token, the most recently admitted sequence is
preempted: its blocks are freed and it goes back to the head of the queue, to be
recomputed (prompt + what it had generated) when it is readmitted.

With prefix caching (on by default, as in vLLM V1) a sequence being admitted first takes the
cached blocks its prompt starts with (prefix_cache.py) and computes only the rest: those
tokens skip prefill. Each first admission counts its tokens as queried and the cached ones
as hits (vLLM's prefix_cache_queries and _hits). Without chunked prefill a sequence is
admitted only when its whole uncached prompt fits in one step's budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from loadgen.sim.model import PerfModel
from loadgen.sim.prefix_cache import BlockPool
from loadgen.sim.sequence import Seq


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True


@dataclass(slots=True)
class Batch:
    work: list[tuple[Seq, int]]  # (sequence, tokens computed for it in this step)
    tokens: int = 0  # new tokens in the step
    kv_tokens: int = 0  # context read from the KV cache by the step's attention
    attention: int = 0  # (query, key) pairs the step's attention scores, causal

    def time(self, perf: PerfModel) -> float:
        """How long the step takes on `perf`'s hardware."""
        return perf.step_time(self.tokens, self.kv_tokens, self.attention, len(self.work)).total


class Scheduler:
    def __init__(self, config: EngineConfig, kv_capacity_tokens: int) -> None:
        self.config = config
        self.blocks = BlockPool(
            kv_capacity_tokens // config.block_size, config.enable_prefix_caching
        )
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.preemptions = 0
        self.prefix_cache_queries = 0  # tokens
        self.prefix_cache_hits = 0  # tokens

    @property
    def total_blocks(self) -> int:
        return self.blocks.total

    @property
    def free_blocks(self) -> int:
        return self.blocks.free

    @property
    def kv_usage(self) -> float:
        return 1 - self.free_blocks / self.total_blocks

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        """Drop a sequence wherever it is and free its blocks (client went away)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.aborted = True
        self._free(seq)

    def schedule(self, now: float) -> Batch:
        """The next step's work; sequences admitted for the first time are stamped `now`."""
        batch = Batch([])
        budget = self.config.max_num_batched_tokens
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.known - seq.computed, budget)
            need = self._blocks_for(seq.computed + n) - len(seq.blocks)
            lost = False
            while need > self.free_blocks and not lost:
                victim = self.running.pop()  # the newest; never one already in this batch
                self._preempt(victim)
                preempted = True
                lost = victim is seq
            if lost:
                break
            budget -= self._take(batch, seq, n, need)
            i += 1
        while (
            self.waiting
            and budget > 0
            and not preempted
            and len(self.running) < self.config.max_num_seqs
        ):
            seq = self.waiting[0]
            size = self.config.block_size
            hits = self.blocks.lookup(seq.block_hashes, seq.known - 1, size)
            cached = len(hits) * size
            if not self.config.enable_chunked_prefill and seq.known - cached > budget:
                break
            n = min(seq.known - cached, budget)
            need = self._blocks_for(cached + n) - len(hits)
            if need + self.blocks.reclaimed(hits) > self.free_blocks:
                break
            self.running.append(self.waiting.popleft())
            if seq.scheduled_at is None:
                seq.scheduled_at = max(now, seq.arrival)
            if seq.preemptions == 0:
                self.prefix_cache_queries += seq.known
                self.prefix_cache_hits += cached
            self.blocks.take(hits)
            seq.blocks = hits
            seq.computed = cached
            budget -= self._take(batch, seq, n, need)
        return batch

    def complete(self, batch: Batch, now: float) -> list[tuple[Seq, float | None]]:
        """Apply a step that ended at `now`: sequences whose whole context is now computed
        sample a token. Returns them with their inter-token gap (None for a first token);
        finished ones leave the batch and free their blocks."""
        sampled = []
        for seq, n in batch.work:
            if seq.aborted:  # left during the step
                continue
            seq.computed += n
            if seq.computed == seq.known:
                sampled.append((seq, seq.advance(1, now)))
                if seq.finished:
                    self.running.remove(seq)
                    self._free(seq)
        return sampled

    def _take(self, batch: Batch, seq: Seq, n: int, blocks: int) -> int:
        seq.blocks += self.blocks.allocate(blocks)
        full = (seq.computed + n) // self.config.block_size
        self.blocks.cache(seq.blocks, seq.block_hashes, full)
        batch.work.append((seq, n))
        batch.tokens += n
        batch.kv_tokens += seq.computed + n
        batch.attention += n * seq.computed + n * (n + 1) // 2
        return n

    def _preempt(self, seq: Seq) -> None:
        self._free(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _free(self, seq: Seq) -> None:
        self.blocks.release(seq.blocks)
        seq.blocks = []

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)
