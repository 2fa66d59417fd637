"""A settling block on the virtual clock (a capacity probe of a virtual: target by rate or
concurrency): the twin runs the level for long enough, and the warm-up and window are read
off its timings by the rules a real probe's runner applies as it goes.

The runner samples the requests in flight every SETTLE_SAMPLE_S and opens the window once
settle.py says the count stopped growing (or ran away, or the cap came); the window then
lasts its settle's share of typical E2Es (budget.py) and its count of requests. Here the
same samples are taken from the timings, so a virtual probe warms up, settles and judges as
a real one would. The level is planned for longer and longer until its timings reach the
window's close; then only the requests the window sends (warm-up and measured) are run, as
virtual.py runs any window: one due after the close is not sent. The twin is causal (a
request changes nothing before it arrives), so leaving those out changes no count the
warm-up was judged on.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from loadgen.analysis import settle
from loadgen.analysis.records import Phase
from loadgen.analysis.settle import Settle
from loadgen.engine import virtual
from loadgen.engine.runner import RAMP_SAMPLE, SETTLE_SAMPLE_S
from loadgen.engine.virtual_requests import Planned
from loadgen.sim import twin
from loadgen.sim.model.presets import Preset


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """How a settling warm-up ended: when, whether it settled, the typical E2E then, and an
    unsettled one's in-flight quarters (settle.quarters)."""

    at: float
    settled: bool
    e2e_s: float | None
    quarters: tuple[float, float] | None


def warm_up(timings: Sequence[twin.Timing], rule: Settle, ramp: float) -> Opened:
    """When the runner would open the window over these timings (runner._warm_up)."""
    sent = sorted(t.arrival for t in timings)
    done = sorted(timings, key=lambda t: t.last_sent)
    ends = [t.last_sent for t in done]
    counts: list[tuple[float, float]] = []
    now = 0.0
    while True:
        arrived, finished = bisect.bisect_right(sent, now), bisect.bisect_right(ends, now)
        counts.append((now, float(arrived - finished)))
        rate = arrived / max(now, SETTLE_SAMPLE_S)
        recent = done[max(0, finished - RAMP_SAMPLE) : finished]
        e2e = float(np.median([t.e2e for t in recent])) if recent else None
        warm = now >= ramp
        if warm and settle.settled([_recent(counts, e2e)], e2e, rate):
            return Opened(now, True, e2e, None)
        if now >= rule.max_s or (warm and settle.ran_away(counts, e2e)):
            return Opened(now, False, None, settle.quarters(counts))
        now += SETTLE_SAMPLE_S


def _recent(counts: list[tuple[float, float]], e2e: float | None) -> list[tuple[float, float]]:
    """The samples settle.settled looks at (its last two windows, and one before them)."""
    window = settle.window_s(e2e)
    if window is None:
        return counts
    since = counts[-1][0] - 2 * window - SETTLE_SAMPLE_S
    return counts[bisect.bisect_left(counts, (since, -1.0)) :]


def closes(
    timings: Sequence[twin.Timing],
    opened: Opened,
    rule: Settle,
    duration: float | None,
    requests: int | None,
) -> tuple[float, int] | None:
    """When the window closes and how many requests it measured (budget.Budget: its time,
    then its count of requests); None when the timings do not yet reach its close."""
    length = rule.window(duration, opened.e2e_s)
    end = opened.at + length if length is not None else opened.at
    measured = sorted(t.arrival for t in timings if t.arrival >= opened.at)
    timed = sum(at < end for at in measured)
    if requests is None or timed >= requests:
        return (end, timed) if measured and measured[-1] >= end else None
    return (measured[requests - 1], requests) if len(measured) >= requests else None


def plan(
    planner: Callable[[virtual.Window], Planned],
    model: Preset,
    rule: Settle,
    window: virtual.Window,
    seed: int,
    replicas: int,
) -> tuple[Planned, virtual.Window, Opened]:
    """One settling level's requests (`planner`: virtual.plan's for a window, `window`'s
    warm-up the least, its duration and requests the least measured): those the window
    sends, the window as it settled, and how its warm-up ended (for the phase: `marked`)."""
    ramp, duration, requests = window.warmup_s, window.duration_s, window.requests
    horizon = max(ramp, rule.max_s) + rule.max_window_s + (duration or 0.0)
    while True:
        planned = planner(virtual.Window(0.0, horizon, None))
        timings = twin.run(model, planned.requests, replicas, seed).timings
        opened = warm_up(timings, rule, ramp)
        closed = closes(timings, opened, rule, duration, requests)
        if closed is not None:
            break
        horizon *= 2
    close, measured = closed
    order = sorted(range(len(timings)), key=lambda i: timings[i].arrival)
    warm = sum(t.arrival < opened.at for t in timings)
    kept = planned.only(sorted(order[: warm + measured]))
    return kept, virtual.Window(opened.at, close - opened.at, None), opened


def marked(phase: Phase, opened: Opened) -> Phase:
    """The block's phase with its settling warm-up: how long, whether it settled."""
    return dataclasses.replace(
        phase, warmup_s=opened.at, settled=opened.settled, warmup_in_flight=opened.quarters
    )
