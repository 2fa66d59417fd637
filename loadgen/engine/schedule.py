"""Arrival schedules and the block plan of a run. Pure, no I/O.

Open loop: `arrivals` yields intended send offsets (seconds from the start of a block); the
client's latency is counted from these offsets, not from when it managed to send, so a
lagging client cannot hide queueing (no coordinated omission). Closed loop has no schedule:
a worker's next intended send is the moment its previous request ended.

A comparative run is cut into blocks, alternating targets (A, B, A, B …) so that drift in
the upstream hits every target alike. Each target's first block starts with the warmup; later
blocks ramp up again over at most that long (the runner decides), since every block starts
from an idle server.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from loadgen.analysis.settle import Settle
from loadgen.replay import sessions
from loadgen.replay.window import Arrival

ARRIVALS = ("poisson", "constant", "gamma")


def arrivals(
    rate: float,
    kind: str,
    rng: np.random.Generator,
    gamma_shape: float = 0.5,
) -> Iterator[float]:
    """Endless increasing offsets with mean gap 1/rate.

    poisson: exponential gaps (dispersion 1); constant: equal gaps; gamma: gaps of the given
    shape (coefficient of variation 1/sqrt(shape): below 1 is burstier than Poisson).
    """
    if not math.isfinite(rate) or rate <= 0:  # a nan rate made an endless, sleepless schedule
        raise ValueError(f"rate must be a positive number, not {rate}")
    mean_gap = 1.0 / rate
    t = 0.0
    if kind == "constant":
        n = 0
        while True:
            yield n * mean_gap
            n += 1
    if kind not in ("poisson", "gamma"):
        raise ValueError(f"unknown arrival process {kind!r}; use one of {', '.join(ARRIVALS)}")
    while True:
        if kind == "poisson":
            gaps = rng.exponential(mean_gap, 1024)
        else:
            gaps = rng.gamma(gamma_shape, mean_gap / gamma_shape, 1024)
        for gap in gaps:
            t += float(gap)
            yield t


@dataclass(frozen=True, slots=True)
class Block:
    """One stretch of load against one target; its ramp-up (≤ warmup_s) is left out of results."""

    target: str
    index: int  # the block's number within its target, from 0
    warmup_s: float
    duration_s: float | None  # measured time, None when limited by requests
    requests: int | None  # measured requests, None when limited by time
    settle: Settle | None = None  # warm up for at least warmup_s, then until steady


def split(total: int, parts: int) -> list[int]:
    """Integer shares that differ by at most one and add up to total."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def plan(
    targets: list[str],
    blocks: int,
    warmup_s: float,
    duration_s: float | None,
    requests: int | None,
    settle: Settle | None = None,
) -> list[Block]:
    """Interleave targets block by block: A0 B0 A1 B1 …, each target's budget split evenly.

    Without `settle`, exactly one of duration and requests limits the measured part; a
    settling block may have both (the window lasts as long as both need) or neither."""
    if settle is None and (duration_s is None) == (requests is None):
        raise ValueError("give exactly one of duration and requests")
    shares = split(requests, blocks) if requests is not None else [None] * blocks
    plan_: list[Block] = []
    for index in range(blocks):
        for target in targets:
            plan_.append(
                Block(
                    target=target,
                    index=index,
                    warmup_s=warmup_s,
                    duration_s=duration_s / blocks if duration_s is not None else None,
                    requests=shares[index],
                    settle=settle,
                )
            )
    return [b for b in plan_ if b.requests is None or b.requests > 0 or b.index == 0]


def shard_count(total: int, index: int, count: int) -> int:
    """Shard `index` of `count`'s part of an integer total (concurrency, requests)."""
    return split(total, count)[index]


@dataclass(frozen=True, slots=True)
class Load:
    """How hard to push: closed loop at `concurrency`, open loop at `rate` requests/s, or a
    trace's records each at its own offset (`replay`)."""

    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    gamma_shape: float = 0.5
    replay: list[Arrival] | None = None
    gap_scale: float = 1.0  # a replayed call's think or tool time after its parent, scaled


def offsets(load: Load, rng: np.random.Generator) -> Iterator[tuple[float, Arrival | None]]:
    """Open-loop offsets from the block's start: a trace's (the calls that wait for no other
    call), else the arrival process's."""
    if load.replay is not None:
        return ((a.offset_s, a) for a in sessions.graph(load.replay).roots)
    assert load.rate is not None
    return ((t, None) for t in arrivals(load.rate, load.arrival, rng, load.gamma_shape))
