"""When has a level's warm-up reached its steady state? Pure, no I/O.

A server handed a new level of load fills up: its batch grows (and, past what it can serve,
its queue) until completions match arrivals. Percentiles measured before that describe the
filling, not the level. So a warm-up that is asked to *settle* lasts at least its given
time and then until the in-flight count stops growing: the mean count over the last window
is not above the window before it by more than GROWTH_ABS requests plus what GROWTH of the
request rate would add in a window (arrivals outrunning completions by GROWTH: the
shortfall steady.py calls saturation), where a window is WINDOW_E2ES typical request
durations (at least MIN_WINDOW_S) — the time the count needs to respond. The count is the
client's (sent, not finished) and, where the server is sampled, vLLM's
`num_requests_running + num_requests_waiting`; both must settle.
A warm-up that reaches its cap still growing ends anyway, marked unsettled: the level's
steadiness cannot be told from it. One whose count ran away — its last quarter's mean at
least RUNAWAY times its second quarter's, and RUNAWAY_ABS requests more — ends as soon as that is
plain (after RUNAWAY_WINDOWS windows): the level is saturated, however long it were watched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GROWTH = 0.10  # steady.SHORTFALL: the same share of arrivals
GROWTH_ABS = 1.0
WINDOW_E2ES = 2.0
MIN_WINDOW_S = 2.0
RUNAWAY = 1.5
RUNAWAY_WINDOWS = 4
RUNAWAY_ABS = 5  # requests: a smaller rise is no runaway, however large in proportion


@dataclass(frozen=True, slots=True)
class Settle:
    """A warm-up that waits for the steady state, and how long the window after it lasts."""

    max_s: float  # the warm-up's cap
    window_e2es: float  # the measured window lasts at least this many typical E2Es
    max_window_s: float  # ... but no longer than this (a saturated server's E2E grows)

    def window(self, duration_s: float | None, e2e_s: float | None) -> float | None:
        """How long the window after a settled warm-up lasts: its own time, and at least
        window_e2es typical E2Es, whichever is longer, at most max_window_s; None: no time."""
        floor = self.window_e2es * e2e_s if e2e_s else 0.0
        return min(self.max_window_s, max(duration_s or 0.0, floor)) or None


def window_s(e2e_s: float | None) -> float | None:
    """How far back each of the two compared windows reaches; None before any E2E is known."""
    if e2e_s is None:
        return None
    return max(MIN_WINDOW_S, WINDOW_E2ES * e2e_s)


def growing(
    samples: Sequence[tuple[float, float]], window: float, rate_per_s: float
) -> bool | None:
    """Whether the count in (time, count) samples still grows, at `rate_per_s` requests a
    second; None when they do not yet span two windows (or a window holds no sample)."""
    if not samples or samples[-1][0] - samples[0][0] < 2 * window:
        return None
    now = samples[-1][0]
    last = [n for t, n in samples if t > now - window]
    before = [n for t, n in samples if now - 2 * window < t <= now - window]
    if not last or not before:
        return None
    earlier, later = sum(before) / len(before), sum(last) / len(last)
    return later - earlier > GROWTH_ABS + GROWTH * rate_per_s * window


def settled(
    series: Sequence[Sequence[tuple[float, float]]], e2e_s: float | None, rate_per_s: float
) -> bool:
    """Every sampled count has stopped growing (see the module docstring)."""
    window = window_s(e2e_s)
    return window is not None and all(growing(s, window, rate_per_s) is False for s in series)


def quarters(samples: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The mean count over the second quarter of the samples' span and over the last."""
    if len(samples) < 8:
        return None
    start, end = samples[0][0], samples[-1][0]
    span = end - start

    def mean(lo: float, hi: float) -> float:
        values = [n for t, n in samples if start + lo * span <= t <= start + hi * span]
        return sum(values) / len(values) if values else 0.0

    return mean(0.25, 0.5), mean(0.75, 1.0)


def ran_away(samples: Sequence[tuple[float, float]], e2e_s: float | None) -> bool:
    """The count grew without end (see the module docstring); never before a request has
    finished, since a server filling its batch with long requests grows as long as they last."""
    window = window_s(e2e_s)
    if window is None or not samples or samples[-1][0] - samples[0][0] < RUNAWAY_WINDOWS * window:
        return False
    found = quarters(samples)
    return found is not None and runaway(*found)


def runaway(before: float, after: float) -> bool:
    """From the mean count over a warm-up's second quarter to its last: ran away."""
    return after >= max(RUNAWAY * before, before + RUNAWAY_ABS)
