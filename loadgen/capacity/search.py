"""The capacity search, pure: how many requests a probe needs, and the next level.

A probe meets, fails or is undecided (verdict.py). Per target, the search brackets
(doubling from the start level until a probe fails, or halving until one meets, down to
its floor) and then bisects the bracket [highest meeting, lowest failing or undecided] until
it is within PRECISION of its lower end (concurrency: until the two are neighbours). A floor
at the start asks only "does the start hold, and how far above it": a start that does not
meet ends the search at one probe; a ceiling caps the doubling, and at the start too, the
search is one level's check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadgen.analysis import stats
from loadgen.analysis.slo import LABELS, Slos, percentile_label
from loadgen.capacity.axis import Axis
from loadgen.capacity.verdict import FAILS, MEETS, UNDECIDED

PRECISION = 0.05  # a bracket this narrow (relative to its lower end) ends the search
MIN_PROBE = 30  # requests: fewer cannot show a trend of TTFT (steady state)
# a virtual: target's probe measures this many times the requests a server's would: on the
# virtual clock they cost CPU milliseconds, and more of them decide a level near the knee
# at once, where a server's probe would be run again
VIRTUAL_REQUESTS = 4


def bounded_samples(p: float) -> int:
    """Fewest samples whose order-statistic 95% interval bounds the p-quantile both ways
    (P50: 6, P90: 36, P99: 368, P99.9: 3,688)."""
    n = stats.min_samples(p)
    while None in stats.order_statistic_ranks(n, p, stats.CONFIDENCE):
        n += 1
    return n


def probe_requests(slos: Slos, asked: int | None, predicted: bool = False) -> int:
    """Requests per probe: what the judged percentiles need, or `asked` if it is enough.

    By default, enough that every judged percentile is bounded from both sides at 95%
    (`predicted`, on the virtual clock: VIRTUAL_REQUESTS times that);
    `asked` may be fewer, but never fewer than the percentile needs to exist at all (P99
    needs 100): a P99 of 50 requests would be their maximum, not a P99.
    """
    ps = [stats.PERCENTILES[slos.percentile(m)] for m in slos.limits]
    if asked is None:
        return max([MIN_PROBE, *(bounded_samples(p) for p in ps)]) * (
            VIRTUAL_REQUESTS if predicted else 1
        )
    for metric in slos.limits:
        pct = slos.percentile(metric)
        need = stats.min_samples(stats.PERCENTILES[pct])
        if asked < need:
            raise ValueError(
                f"{asked} requests per probe cannot judge {LABELS[metric]} at "
                f"{percentile_label(pct)}: it needs at least {need}"
            )
    return asked


@dataclass(slots=True)
class Search:
    """One target's bracket and its next level, on decided probes only.

    `passing` and `failing` come from probes that met or failed; a level still undecided
    after its extensions only marks where the capacity is (its interval straddles the
    limit there): bisection stops below it, as it would below a failing level, but it never
    counts as either.
    """

    axis: Axis
    start: float
    precision: float = PRECISION
    floor: float | None = None  # the lowest level halving goes to (None: the axis's)
    ceiling: float | None = None  # the highest level doubling goes to (None: no end)
    tried: list[tuple[float, str]] = field(default_factory=list)  # (level, outcome)

    def record(self, level: float, outcome: str) -> None:
        self.tried.append((level, outcome))

    def _levels(self, outcome: str) -> list[float]:
        return [level for level, seen in self.tried if seen == outcome]

    @property
    def failing(self) -> float | None:
        """The lowest level that failed."""
        return min(self._levels(FAILS), default=None)

    @property
    def passing(self) -> float | None:
        """The highest level that met below the lowest that failed: a pass above a failure
        (noise near the knee) does not raise the capacity past a level already seen failing."""
        ceiling = self.failing
        return max(
            (lvl for lvl in self._levels(MEETS) if ceiling is None or lvl < ceiling),
            default=None,
        )

    @property
    def undecided(self) -> list[float]:
        """Levels left undecided above the capacity (and below the lowest failing one)."""
        low, high = self.passing, self.failing
        return sorted(
            lvl
            for lvl in self._levels(UNDECIDED)
            if (low is None or lvl > low) and (high is None or lvl < high)
        )

    @property
    def _upper(self) -> float | None:
        """Where bisection stops from above: the lowest undecided or failing level."""
        return min([*self.undecided, *([self.failing] if self.failing is not None else [])],
                   default=None)  # fmt: skip

    def next_level(self) -> float | None:
        """The level to probe next; None once the bracket is narrow enough or nothing meets."""
        low, high = self.passing, self._upper
        if low is None and high is None:
            return self.axis.level(self.start)
        if low is None:
            assert high is not None
            lower = self.axis.level(high / 2)
            lowest = self.axis.floor(self.start) if self.floor is None else self.floor
            return lower if lowest <= lower < high else None
        if high is None:
            if self.ceiling is not None and low >= self.ceiling:
                return None
            higher = self.axis.level(low * 2)
            return higher if self.ceiling is None else min(higher, self.ceiling)
        if self.converged:
            return None
        return self.axis.level((low + high) / 2)

    @property
    def converged(self) -> bool:
        """The capacity is pinned: within `precision` of the level above it that did not
        meet, or its neighbour on the axis (or bisecting would only repeat a level)."""
        low, high = self.passing, self._upper
        if low is None or high is None:
            return False
        middle = self.axis.level((low + high) / 2)
        return (
            high - low <= self.precision * low
            or self.axis.neighbours(low, high)
            or middle in (low, high)
        )


def crossing(low: Mapping[str, Any], high: Mapping[str, Any]) -> float | None:
    """Where the binding SLO's percentile crosses its limit, by straight-line interpolation
    between two probes (their `level` and `ratios`, value / limit); the binding SLO is the
    one furthest over its limit at `high`. None when no SLO rises to its limit between them
    (saturation, not an SLO, ends the range)."""
    above = high["ratios"]
    if not above:
        return None
    metric = max(above, key=above.__getitem__)
    r0, r1 = low["ratios"].get(metric), above[metric]
    if r0 is None or r1 <= r0 or max(r0, r1) < 1:
        return None
    return low["level"] + (1 - r0) / (r1 - r0) * (high["level"] - low["level"])
