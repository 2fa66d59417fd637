"""How each request's timings move with the engine's efficiency terms, the schedule held
fixed: the derivatives a fit steps by, from one replay. Pure, no I/O.

A step's time is max(memory, compute) + communication + overhead (model/roofline.py), so its
derivative by the log of each term is one of its parts: −memory for MBU when the step is
memory-bound, −compute for MFU when it is compute-bound, the host overhead, the sequences'
overhead, the all-reduces' fixed latency and, negated, their transfer time. With the
batches held as they were, a request's first token, last token and scheduling come later
by the sum of those derivatives over the steps from the one in flight when it arrived to
the one they happen at; its queue time (vLLM's, from the step after the one in flight) by
the sum over the steps it waited in the queue. (Steps before its arrival would delay it too
in a frozen schedule, but a real engine's batches absorb that: how many steps a long busy
period has depends on the step time.) Finite differences would not do: a changed term
shifts which step a request falls into, which moves a single request's TTFT by a whole
step, so the difference quotients are noise.
"""

from __future__ import annotations

import bisect

from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.twin import deployment
from loadgen.sim.twin.cluster import Sampled

ENGINE_TERMS = (
    "mbu",
    "mfu",
    "host_overhead",
    "sequence_overhead",
    "allreduce_latency",
    "interconnect_bandwidth",
)
Vector = list[float]


class Sensitivity:
    """An observer of a twin run (deployment.run's `observe`): per request, the derivatives of
    when it was scheduled, when its first token and when its last came."""

    def __init__(self, preset: Preset, names: list[str], requests: int) -> None:
        unknown = set(names) - set(ENGINE_TERMS)
        if unknown:
            raise ValueError(f"no step derivative for {sorted(unknown)}")
        self.names = names
        perf = preset.perf
        self._host = perf.efficiency.host_overhead
        self._per_seq = perf.efficiency.sequence_overhead
        tp = perf.hardware.tensor_parallel
        layers = perf.model.layers
        self._latency = 2 * layers * perf.hardware.allreduce_latency if tp > 1 else 0.0
        self._periods: dict[int, tuple[float, Vector]] = {}  # replica: (last end, sum)
        self._ends: dict[int, list[float]] = {}  # replica: each step's end
        self._befores: dict[int, list[Vector]] = {}  # replica: the sum before each step
        self.scheduled: list[Vector | None] = [None] * requests
        self.first: list[Vector | None] = [None] * requests
        self.last: list[Vector | None] = [None] * requests

    def __call__(
        self, replica: int, batch: Batch, step: StepTime, now: float, sampled: Sampled
    ) -> None:
        start = now - step.total
        end, before = self._periods.get(replica, (-1.0, []))
        if not before or start > end + 1e-9:  # after an idle gap: a new busy period
            before = [0.0] * len(self.names)
        parts = self._parts(step, len(batch.work))
        after = [b + parts[name] for b, name in zip(before, self.names, strict=True)]
        for seq, _tokens in batch.work:
            i = seq.index
            if self.scheduled[i] is None:
                self.scheduled[i] = before
        for seq, gap in sampled:
            i = seq.index
            if gap is None and self.first[i] is None:
                self.first[i] = after
            if seq.finished:
                self.last[i] = after
        self._periods[replica] = (now, after)
        self._ends.setdefault(replica, []).append(now)
        self._befores.setdefault(replica, []).append(before)

    def _parts(self, step: StepTime, sequences: int) -> dict[str, float]:
        memory_bound = step.memory >= step.compute
        return {
            "mbu": -step.memory if memory_bound else 0.0,
            "mfu": 0.0 if memory_bound else -step.compute,
            "host_overhead": self._host,
            "sequence_overhead": self._per_seq * sequences,
            "allreduce_latency": self._latency,
            "interconnect_bandwidth": -(step.communication - self._latency),
        }

    def _before_step_ending_after(self, replica: int, at: float) -> Vector:
        """The busy period's sum before the first step that ends after `at` (or the last)."""
        ends = self._ends[replica]
        return self._befores[replica][min(bisect.bisect_right(ends, at), len(ends) - 1)]

    def of(self, i: int, kind: str, timing: deployment.Timing) -> Vector:
        """d figure / d log(term) of request i's `kind` (ttft, tpot, queue, prefill,
        decode), each term in `names` order."""
        scheduled, first, last = self.scheduled[i], self.first[i], self.last[i]
        assert scheduled is not None and first is not None and last is not None
        if kind == "ttft":
            # the steps since the one in flight at its arrival (none in flight: a new period)
            start = self._before_step_ending_after(timing.replica, timing.engine_arrival)
            return [f - s for f, s in zip(first, start, strict=True)]
        if kind == "queue":
            # the steps from the first that ends after it was queued (queued at a step's start)
            start = self._before_step_ending_after(timing.replica, timing.queued + 1e-9)
            return [s - b for s, b in zip(scheduled, start, strict=True)]
        if kind == "prefill":
            return [f - s for f, s in zip(first, scheduled, strict=True)]
        decode = [a - f for a, f in zip(last, first, strict=True)]
        if kind == "decode":
            return decode
        return [d / max(1, timing.output_tokens - 1) for d in decode]
