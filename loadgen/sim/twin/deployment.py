"""A deployment's twin: a list of requests through N replicas of a preset on the virtual
clock (cluster.py), each request's timings back. Pure, no I/O.

A request names what the engine needs of it: when it reached the router, its prompt and
output lengths, and what its context (prompt, then output) shares with other requests: its
`prefix`, the named parts the context opens with, each (name, tokens). Two requests whose
parts agree up to a token have the same tokens up to there, as vLLM's chained block hashes
say, so the replica's prefix cache serves them to the later one while they stay cached. A
part may run on into the output: vLLM V1 caches an answer's blocks as they are computed, so
a conversation's next turn, whose prompt repeats the answer, finds them too.

A request may wait on an earlier one, its `parent` (by index in the list): it reaches the
router `gap_s` after the parent finished, and its own `arrival` is then ignored. That is a
conversation's next turn (its parent the turn before, the gap the user's think time) and an
agent's call after a tool ran; calls with one parent (a fan-out) arrive together and run in
parallel, and a closed-loop stream is a chain of such requests.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.model.sequence import Seq
from loadgen.sim.twin.cluster import Cluster, Observer, Sampled


@dataclass(frozen=True, slots=True)
class Request:
    arrival: float  # seconds on the run's clock
    prompt_tokens: int
    output_tokens: int
    prefix: tuple[tuple[str, int], ...] = ()  # the named parts its context opens with
    parent: int | None = None  # the earlier request it waits on, by index
    gap_s: float = 0.0  # from its parent's end to its own arrival


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's path through the twin, in seconds on the run's clock."""

    replica: int
    arrival: float  # at the router
    engine_arrival: float  # handed to the engine (after the front end)
    queued: float  # taken into the engine's queue: the end of the step in flight, if any
    scheduled: float  # first admitted to a step
    first_token: float  # sampled by the engine
    finished: float
    # the first and last tokens reached the client (after the front end's output work: the
    # engine's times when the preset has none)
    first_sent: float
    last_sent: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int  # prompt tokens its first admission found in the prefix cache
    preemptions: int
    batch: float  # mean sequences per step over the steps it was in

    @property
    def ttft(self) -> float:
        """As the client sees it: from its arrival to the first token sent."""
        return self.first_sent - self.arrival

    @property
    def tpot(self) -> float | None:
        """(last − first token sent) / (output − 1), None below two tokens (as loadgen's)."""
        if self.output_tokens < 2:
            return None
        return (self.last_sent - self.first_sent) / (self.output_tokens - 1)

    @property
    def e2e(self) -> float:
        return self.last_sent - self.arrival

    @property
    def queue(self) -> float:
        """The server's queue time (vLLM's queue_time): queued to scheduled. The wait for
        the step in flight at the engine's arrival is in neither this nor `prefill`, as in
        vLLM's timings; the client's TTFT holds it."""
        return self.scheduled - self.queued

    @property
    def prefill(self) -> float:
        """Scheduled to first token (vLLM's time_to_first_token in its metrics)."""
        return self.first_token - self.scheduled

    @property
    def decode(self) -> float:
        return self.finished - self.first_token


@dataclass(slots=True)
class Steps:
    """What the engines did, over all replicas: what a fit needs to know it could see."""

    count: int = 0
    sequence_steps: int = 0  # sequences summed over steps: what a run's cost grows with
    busy_s: float = 0.0
    max_tokens: int = 0  # the largest step's new tokens
    max_sequences: int = 0
    min_sequences: int = 0  # the smallest step's sequences (0: no step)
    compute_bound: int = 0  # steps where compute outlasted the memory reads
    communication_s: float = 0.0
    overhead_s: float = 0.0

    def add(self, batch: Batch, step: StepTime) -> None:
        self.count += 1
        self.busy_s += step.total
        if batch.tokens > self.max_tokens:
            self.max_tokens = batch.tokens
        sequences = len(batch.work)
        self.sequence_steps += sequences
        if sequences > self.max_sequences:
            self.max_sequences = sequences
        if not self.min_sequences or sequences < self.min_sequences:  # unset, or smaller
            self.min_sequences = sequences
        self.compute_bound += step.compute_bound
        self.communication_s += step.communication
        self.overhead_s += step.overhead


@dataclass(frozen=True, slots=True)
class Result:
    timings: list[Timing]  # in the order of the requests given
    steps: Steps
    elapsed: float  # when the last step ended
    per_replica: list[int]  # requests each replica served


def block_hashes(
    prefix: Sequence[tuple[str, int]], tokens: int, block_size: int
) -> tuple[bytes, ...]:
    """A hash for each full block of the first `tokens` tokens that ends inside the named
    parts: the chain of part names up to the block's end, and where in the context it ends."""
    hashes: list[bytes] = []
    chain, end = b"", 0
    for name, n in prefix:
        chain = hashlib.blake2b(chain + name.encode(), digest_size=16).digest()
        start, end = end, min(end + max(0, n), tokens)
        first = (start // block_size + 1) * block_size
        hashes += (chain + stop.to_bytes(8, "little") for stop in range(first, end + 1, block_size))
        if end == tokens:
            break
    return tuple(hashes)


# the slot behind _SharingSeq's lazy property: a descriptor, which the type checker reads as
# the instance attribute
_HASHES: Any = vars(Seq)["block_hashes"]


class _Seq(Seq):
    """A Seq that remembers its request and the batches it was in."""

    __slots__ = ("batch_sum", "replica", "sent_at", "steps_in")

    def __init__(self, index: int, request: Request, arrival: float, interval: int) -> None:
        super().__init__(request.prompt_tokens, request.output_tokens, arrival, interval)
        self.index = index
        self.sent_at = arrival
        self.replica = -1
        self.batch_sum = 0
        self.steps_in = 0


class _SharingSeq(_Seq):
    """One with a prefix: its block hashes are made when the scheduler first asks and
    dropped once it finished, so a long trace holds them only for the requests in the
    engine (a request without one pays nothing for this)."""

    __slots__ = ("block_size", "prefix")

    def __init__(
        self, index: int, request: Request, arrival: float, interval: int, block_size: int
    ) -> None:
        super().__init__(index, request, arrival, interval)
        self.prefix: tuple[tuple[str, int], ...] | None = request.prefix
        self.block_size = block_size

    @property
    def block_hashes(self) -> tuple[bytes, ...]:
        if self.prefix is not None:  # first asked: over prompt and output
            tokens = self.prompt_tokens + self.output_tokens
            _HASHES.__set__(self, block_hashes(self.prefix, tokens, self.block_size))
            self.prefix = None
        return _HASHES.__get__(self)

    @block_hashes.setter
    def block_hashes(self, hashes: tuple[bytes, ...]) -> None:
        _HASHES.__set__(self, hashes)


def _seq(index: int, request: Request, arrival: float, interval: int, block_size: int) -> _Seq:
    if request.prefix:
        return _SharingSeq(index, request, arrival, interval, block_size)
    return _Seq(index, request, arrival, interval)


def run(
    preset: Preset,
    requests: Sequence[Request],
    replicas: int = 1,
    seed: int = 0,
    observe: Observer | None = None,
    stream_interval: int = 1,
) -> Result:
    """Every request through `replicas` engines of `preset`; ValueError for a request the
    model cannot take (longer than its context). `observe` is told of every step as it
    ends (virtual.Observer); a sequence's `index` is its request's, and its `released`
    says when a streamed chunk ends (every `stream_interval` tokens after the first).
    ValueError for a parent that is not an earlier request, or a gap that is no time."""
    if stream_interval < 1:
        raise ValueError(f"stream_interval must be ≥ 1, not {stream_interval}")
    _check(requests, preset.max_model_len)
    block = preset.engine.block_size
    seqs: list[_Seq | None] = [None] * len(requests)
    waiting: dict[int, list[int]] = {}  # a parent's index: its children's, in order
    cluster = Cluster.of(preset, replicas, seed)
    for i, r in enumerate(requests):
        if r.parent is not None:
            waiting.setdefault(r.parent, []).append(i)
            continue
        seqs[i] = seq = _seq(i, r, r.arrival, stream_interval, block)
        cluster.submit(seq)
    steps = Steps()

    def follow_up(done: Seq, now: float) -> list[Seq]:
        done.block_hashes = ()  # its blocks are freed: the pool keeps the hashes it caches
        children: list[Seq] = []
        for i in waiting.pop(done.index, ()):
            at = now + requests[i].gap_s
            seqs[i] = seq = _seq(i, requests[i], at, stream_interval, block)
            children.append(seq)
        return children

    def count(replica: int, batch: Batch, step: StepTime, now: float, sampled: Sampled) -> None:
        steps.add(batch, step)
        size = len(batch.work)
        for ours, _n in cast("list[tuple[_Seq, int]]", batch.work):  # the twin runs its own
            ours.batch_sum += size
            ours.steps_in += 1
            ours.replica = replica
        if observe is not None:
            observe(replica, batch, step, now, sampled)

    elapsed = cluster.run(follow_up, count)
    served = [0] * replicas
    timings = []
    for ran in seqs:
        assert ran is not None, "every request ran"
        served[ran.replica] += 1
        timings.append(_timing(ran))
    return Result(timings, steps, elapsed, served)


def _check(requests: Sequence[Request], limit: int) -> None:
    """ValueError, naming the request, for one the twin cannot run."""
    for i, r in enumerate(requests):
        if r.prompt_tokens < 1 or r.output_tokens < 1:
            raise ValueError(f"request {i}: prompt and output need at least one token")
        if r.prompt_tokens + r.output_tokens > limit:
            raise ValueError(
                f"request {i}: {r.prompt_tokens} + {r.output_tokens} tokens is more than the "
                f"model's context ({limit})"
            )
        if r.parent is not None and not 0 <= r.parent < i:
            raise ValueError(f"request {i}: its parent {r.parent} is not an earlier request")
        if not 0 <= r.gap_s < math.inf:
            raise ValueError(f"request {i}: a gap of {r.gap_s} s")


def _timing(seq: _Seq) -> Timing:
    """A finished sequence's path through the twin."""
    assert seq.finished_at is not None
    assert seq.queued_at is not None and seq.scheduled_at is not None
    assert seq.first_token_at is not None
    assert seq.first_sent_at is not None and seq.last_sent_at is not None
    return Timing(
        replica=seq.replica,
        arrival=seq.sent_at,
        engine_arrival=seq.arrival,
        queued=seq.queued_at,
        scheduled=seq.scheduled_at,
        first_token=seq.first_token_at,
        finished=seq.finished_at,
        first_sent=seq.first_sent_at,
        last_sent=seq.last_sent_at,
        prompt_tokens=seq.prompt_tokens,
        output_tokens=seq.output_tokens,
        cached_tokens=seq.cached_tokens,
        preemptions=seq.preemptions,
        batch=seq.batch_sum / max(1, seq.steps_in),
    )
