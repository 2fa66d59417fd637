"""Continuous batching as vLLM's V1 scheduler does it, without the clock. Pure, no I/O.

Every step has a token budget (max_num_batched_tokens). Running sequences come first: a
decoding sequence needs one token, a sequence still in prefill takes what is left of the
budget (chunked prefill). Waiting sequences are admitted in arrival order while there is
budget, a free slot (max_num_seqs) and KV-cache blocks for their first chunk. When the cache
cannot hold a running sequence's next token, the most recently admitted sequence is
preempted: its blocks are freed and it goes back to the head of the queue, to be
recomputed (prompt + what it had generated) when it is readmitted.

vLLM's V0 engine without chunked prefill (`scheduler = "v0"`, as vLLM ran until chunked
prefill became its default) scheduled differently: a step that can admit a waiting prompt runs
prompts only (as many whole ones as the budget, free slots and the cache allow), and the
running sequences decode only in steps with no prompt to admit; so every prefill stalls
every decoding sequence for its whole length, and gives them no token. With chunked prefill
on, V0 batched as V1 does.

With prefix caching (on by default, as in vLLM V1) a sequence being admitted first takes the
cached blocks its prompt starts with (prefix_cache.py) and computes only the rest: those
tokens skip prefill. Each first admission counts its tokens as queried and the cached ones
as hits (vLLM's prefix_cache_queries and _hits). Without chunked prefill a sequence is
admitted only when its whole uncached prompt fits in one step's budget.

With speculative decoding (speculation.py) a decoding sequence's step also verifies its
draft tokens (they take budget and compute) and samples 1 + the drafts accepted; with a
draft model the step also runs it once per draft token (Batch.step).

Once a step leaves the batch unchanged (every sequence sampled, none finished, and none
waiting or no slot free), the steps after it are scheduled by a stride (stride.py) until
something changes: the same work, without a pass over every sequence.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from dataclasses import dataclass

from loadgen.sim.model.prefix_cache import BlockPool
from loadgen.sim.model.roofline import PerfModel, StepTime
from loadgen.sim.model.sequence import Seq
from loadgen.sim.model.speculation import SpecStats, Speculation
from loadgen.sim.model.stride import Stride

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's CacheConfig BlockSize (config/cache.py)
SCHEDULERS = ("v1", "v0")  # vLLM's engine generations (see the module's docstring)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    scheduler: str = "v1"  # one of SCHEDULERS
    speculation: Speculation | None = None  # --speculative-config (speculation.py)


@dataclass(slots=True)
class Batch:
    work: list[tuple[Seq, int]]  # (sequence, tokens computed for it in this step)
    tokens: int = 0  # new tokens in the step
    kv_tokens: int = 0  # context read from the KV cache by the step's attention
    attention: int = 0  # (query, key) pairs the step's attention scores, causal
    speculation: Speculation | None = None  # the engine's, when it speculates
    drafts: int = 0  # draft tokens verified in the step
    drafting: int = 0  # sequences that verify drafts (and get new ones proposed)
    drafting_context: int = 0  # tokens those sequences hold

    def step(self, perf: PerfModel) -> StepTime:
        """The step's time on `perf`'s hardware, by part. A draft model runs k passes after
        the forward: one over the step's own tokens (its KV must follow the target's), then
        k − 1 over one token per drafting sequence."""
        time = perf.step_time(self.tokens, self.kv_tokens, self.attention, len(self.work))
        spec = self.speculation
        if spec is None or spec.draft is None or not self.tokens:
            return time
        own = self.tokens - self.drafts
        passes = [(own, self.kv_tokens, self.attention)]
        n, context = self.drafting, self.drafting_context
        k = spec.num_speculative_tokens if n else 1
        passes += [(n, context + i * n, context + i * n) for i in range(1, k)]
        return dataclasses.replace(time, draft=perf.draft_time(spec.draft, passes))


class Scheduler:
    def __init__(self, config: EngineConfig, kv_capacity_tokens: int, seed: int = 0) -> None:
        self.config = config
        self._spec_rng = random.Random(f"speculation:{seed}")
        self.blocks = BlockPool(
            kv_capacity_tokens // config.block_size, config.enable_prefix_caching
        )
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self._entered: list[Seq] = []  # added since the last step was scheduled
        self.preemptions = 0
        self.prefix_cache_queries = 0  # tokens
        self.prefix_cache_hits = 0  # tokens
        # while the last step left the batch as it was: the steps after it
        self._stride: Stride | None = None

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

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
        self._entered.append(seq)

    def abort(self, seq: Seq) -> None:
        """Drop a sequence wherever it is and free its blocks (client went away)."""
        self._stride = None
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.aborted = True
        self._free(seq)

    @property
    def full(self) -> bool:
        """Every slot (max_num_seqs) taken: nothing waiting is admitted."""
        return len(self.running) >= self.config.max_num_seqs

    @property
    def prefill_first(self) -> bool:
        """V0 without chunked prefill: prompts get steps of their own (the module's docstring)."""
        return self.config.scheduler == "v0" and not self.config.enable_chunked_prefill

    def schedule(self, now: float) -> Batch:
        """The next step's work. Sequences added since the last call are stamped queued
        `now`, as vLLM's engine core takes new requests in between steps (a request that
        arrives during a step waits it out before its queue time starts); those admitted
        for the first time are stamped scheduled `now`."""
        if self._entered:
            for seq in self._entered:
                seq.queued_at = max(now, seq.arrival)
            self._entered.clear()
        if self._stride is not None and (not self.waiting or self.full):
            strode = self._stride_on(self._stride)
            if strode is not None:
                return strode
        self._stride = None
        batch = Batch([], speculation=self.config.speculation)
        budget = self.config.max_num_batched_tokens
        if self.prefill_first:
            self._admit(batch, budget, now)
            if not batch.work:
                self._continue(batch, budget)
            return batch
        budget, preempted = self._continue(batch, budget)
        if not preempted:
            self._admit(batch, budget, now)
        return batch

    def _continue(self, batch: Batch, budget: int) -> tuple[int, bool]:
        """The running sequences' next tokens into `batch`, preempting the newest while the
        cache cannot hold them: the budget left, and whether any was preempted."""
        preempted = False
        speculating = self.config.speculation is not None
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = min(seq.known - seq.computed, budget)
            need = self._blocks_for(seq.computed + n) - len(seq.blocks)
            lost = False
            while need > 0 and need > self.free_blocks and not lost:
                victim = running.pop()  # the newest; never one already in this batch
                self._preempt(victim)
                preempted = True
                lost = victim is seq
            if lost:
                break
            drafts = min(self._drafts(seq, n), budget - n) if speculating else 0
            budget -= self._take(batch, seq, n, need, drafts)
            i += 1
        return budget, preempted

    def _stride_on(self, stride: Stride) -> Batch | None:
        """The steady batch's next step, its sequences' new and filled blocks given in
        running order; None (nothing changed) when the cache cannot give them all, for the
        full pass to preempt as it does."""
        due = stride.due()
        if due:  # most steps: no sequence starts or fills a block
            needs = [self._blocks_for(seq.computed + 1) - len(seq.blocks) for _, seq in due]
            if sum(need for need in needs if need > 0) > self.free_blocks:
                return None
            for (_, seq), need in zip(due, needs, strict=True):
                self._grow(seq, 1, need)
        context = stride.advance(due)
        tokens = len(stride.work)
        return Batch(stride.work, tokens, context, context)

    def _admit(self, batch: Batch, budget: int, now: float) -> None:
        """Waiting sequences into `batch` in arrival order while budget, a slot and the
        cache allow."""
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
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
                seq.cached_tokens = cached
                prompt_blocks = min(len(seq.block_hashes), seq.prompt_tokens // size)
                seq.created_tokens = max(0, prompt_blocks * size - cached)
            self.blocks.take(hits)
            seq.blocks = hits
            seq.hashed_blocks = len(hits)
            seq.computed = cached
            budget -= self._take(batch, seq, n, need)

    def complete(self, batch: Batch, now: float) -> list[tuple[Seq, float | None]]:
        """Apply a step that ended at `now`: sequences whose whole context is now computed
        sample a token. Returns them with their inter-token gap (None for a first token);
        finished ones leave the batch and free their blocks."""
        sampled = []
        speculating = self.config.speculation is not None
        steady = not speculating  # a stride cannot know which drafts a step accepts
        for seq, n in batch.work:
            if seq.aborted:  # left during the step
                steady = False
                continue
            seq.computed += n
            if seq.computed < seq.known:
                steady = False  # a prefill chunk: more of its prompt to come
            elif speculating:
                tokens = self._verified(seq, n)
                sampled.append((seq, seq.advance(tokens, now)))
                seq.computed += tokens - 1  # the accepted drafts' KV came with the step
            else:
                sampled.append((seq, seq.advance(1, now)))
            if seq.finished_at is not None:  # this step's last token (Seq.advance)
                steady = False
                self.running.remove(seq)
                self._free(seq)
        if not steady or len(batch.work) != len(self.running):
            self._stride = None
        elif self._stride is None:
            self._stride = Stride(self.running, self.config.block_size)
        return sampled

    def _take(self, batch: Batch, seq: Seq, n: int, blocks: int, drafts: int = 0) -> int:
        """Schedule n tokens of seq (and `drafts` draft tokens to verify with them)."""
        self._grow(seq, n, blocks)
        batch.work.append((seq, n))
        m = n + drafts
        if drafts:
            batch.drafts += drafts
            batch.drafting += 1
            batch.drafting_context += seq.computed + m
        batch.tokens += m
        batch.kv_tokens += seq.computed + m
        batch.attention += m * seq.computed + m * (m + 1) // 2
        return m

    def _grow(self, seq: Seq, n: int, blocks: int) -> None:
        """Give seq the `blocks` its next n tokens need; a block they fill joins the cache."""
        if blocks > 0:  # a decoding sequence needs one every block_size tokens
            seq.blocks += self.blocks.allocate(blocks)
        full = (seq.computed + n) // self.config.block_size
        if full > seq.hashed_blocks:  # a block filled: its hash joins the cache
            self.blocks.cache(seq.blocks, seq.block_hashes, full, seq.hashed_blocks)
            seq.hashed_blocks = full

    def _drafts(self, seq: Seq, n: int) -> int:
        """Draft tokens a decode step verifies for seq: none without speculation."""
        spec = self.config.speculation
        if spec is None or n != 1 or not seq.generated:
            return 0
        return spec.num_speculative_tokens

    def _verified(self, seq: Seq, n: int) -> int:
        """Tokens the step samples for seq: 1, or 1 + the drafts it accepted."""
        spec = self.config.speculation
        if spec is None or self._drafts(seq, n) == 0:
            return 1
        accepted = spec.accepted(self._spec_rng)
        if seq.spec is None:
            seq.spec = SpecStats(spec.num_speculative_tokens)
        seq.spec.record(accepted)
        return min(1 + accepted, seq.output_tokens - seq.generated)

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
