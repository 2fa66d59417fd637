"""The capacity search, pure: a probe's verdict, how many requests it needs, the next level.

A level *meets* when every SLO holds at its percentile, the level is steady (steady.py),
the client kept up (`valid`) and at most 1% of its requests failed. Per target, the search
brackets (doubling from the start level until a probe fails, or halving until one meets)
and then bisects the bracket [highest meeting, lowest failing] until it is within
PRECISION of its lower end (concurrency: until the two are neighbours).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadgen import stats
from loadgen.slo import LABELS, Slos, percentile_label

PRECISION = 0.10  # a bracket this narrow (relative to its lower end) ends the search
MAX_FAILED = 0.01  # a probe with more failed requests than this does not meet
MIN_PROBE = 30  # requests: fewer cannot show a trend of TTFT (steady state)
FLOOR = 1 / 8  # open loop: halve down to this share of the start level, then give up
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def bounded_samples(p: float) -> int:
    """Fewest samples whose order-statistic 95% interval bounds the p-quantile both ways
    (P50: 6, P90: 36, P99: 368, P99.9: 3,688)."""
    n = stats.min_samples(p)
    while None in stats.order_statistic_ranks(n, p, stats.CONFIDENCE):
        n += 1
    return n


def probe_requests(slos: Slos, asked: int | None) -> int:
    """Requests per probe: what the judged percentiles need, or `asked` if it is enough.

    By default, enough that every judged percentile is bounded from both sides at 95%;
    `asked` may be fewer, but never fewer than the percentile needs to exist at all (P99
    needs 100): a P99 of 50 requests would be their maximum, not a P99.
    """
    ps = [stats.PERCENTILES[slos.percentile(m)] for m in slos.limits]
    if asked is None:
        return max([MIN_PROBE, *(bounded_samples(p) for p in ps)])
    for metric in slos.limits:
        pct = slos.percentile(metric)
        need = stats.min_samples(stats.PERCENTILES[pct])
        if asked < need:
            raise ValueError(
                f"{asked} requests per probe cannot judge {LABELS[metric]} at "
                f"{percentile_label(pct)}: it needs at least {need}"
            )
    return asked


def seconds(value: float) -> str:
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.2f} s"


@dataclass(frozen=True, slots=True)
class Verdict:
    meets: bool
    steady: bool
    valid: bool
    failures: list[str]  # why it does not meet, in words
    ratios: dict[str, float]  # SLO metric -> value / limit (over 1: missed)


def verdict(target: Mapping[str, Any], slos: Slos) -> Verdict:
    """One probe's summary (targets.<name> of its summary.json) against the SLOs."""
    failures, ratios = [], {}
    for metric, limit in slos.limits.items():
        pct = slos.percentile(metric)
        value = target["metrics"][METRICS[metric]][pct]
        name = f"{LABELS[metric]} {percentile_label(pct)}"
        if value is None:
            failures.append(f"{name}: too few samples")
            continue
        ratios[metric] = value / limit
        if value > limit:
            failures.append(f"{name} {seconds(value)} > {seconds(limit)}")
    state = target.get("steady_state") or {"steady": True, "reasons": []}
    if not state["steady"]:
        failures.append("saturated: " + "; ".join(state["reasons"]))
    if not target["valid"]:
        failures.append("invalid: " + "; ".join(target["invalid_reasons"]))
    requests = target["requests"]
    total = requests["ok"] + requests["failed"]
    if total and requests["failed"] > MAX_FAILED * total:
        failures.append(f"{requests['failed']} of {total} requests failed")
    return Verdict(not failures, state["steady"], target["valid"], failures, ratios)


@dataclass(slots=True)
class Search:
    """One target's bracket and its next level."""

    by: str  # rate | concurrency
    start: float
    tried: list[tuple[float, bool]] = field(default_factory=list)  # (level, meets)

    def record(self, level: float, meets: bool) -> None:
        self.tried.append((level, meets))

    @property
    def failing(self) -> float | None:
        """The lowest level that failed."""
        return min((level for level, meets in self.tried if not meets), default=None)

    @property
    def passing(self) -> float | None:
        """The highest level that met below the lowest that failed: a pass above a failure
        (noise near the knee) does not raise the capacity past a level already seen failing."""
        ceiling = self.failing
        return max(
            (lvl for lvl, meets in self.tried if meets and (ceiling is None or lvl < ceiling)),
            default=None,
        )

    @property
    def floor(self) -> float:
        return 1 if self.by == "concurrency" else self.start * FLOOR

    def next_level(self) -> float | None:
        """The level to probe next; None once the bracket is narrow enough or nothing meets."""
        if self.passing is None and self.failing is None:
            return self._level(self.start)
        if self.passing is None:
            assert self.failing is not None
            lower = self._level(self.failing / 2)
            return lower if lower >= self.floor and lower < self.failing else None
        if self.failing is None:
            return self._level(self.passing * 2)
        if self.converged:
            return None
        return self._level((self.passing + self.failing) / 2)

    @property
    def converged(self) -> bool:
        """The bracket is narrow enough: within PRECISION, or neighbouring concurrencies."""
        if self.passing is None or self.failing is None:
            return False
        if self.by == "concurrency" and self.failing - self.passing <= 1:
            return True
        return self.failing - self.passing <= PRECISION * self.passing

    def _level(self, value: float) -> float:
        if self.by == "concurrency":
            return float(max(1, math.floor(value)))
        return float(f"{value:.3g}")  # levels a person would write down
