"""Percentiles, confidence intervals, goodput and MBU. Pure, no I/O.

A percentile is only reported when the sample can support it: P99.9 needs at least 1,000
samples (one beyond the percentile), otherwise it is None rather than an invented maximum.

A percentile's confidence interval is the distribution-free order-statistic interval: the
number of samples below the true p-quantile is Binomial(n, p) whatever the latency
distribution, so [x(r), x(s)] covers it with probability P(r ≤ B < s), chosen ≥ 95% with
equal tails. Bootstrap intervals cover tail percentiles far less often than they claim when
few samples lie beyond them (~85% for P99 of a few hundred); this one never covers less, and
says so when the sample cannot bound a side at all (P99 needs 368 samples for an upper bound).

Differences between two targets use the bootstrap, computed without resampling the data:
the k-th smallest of n indices drawn uniformly from 1..n is ceil(n·U) with U ~ Beta(k,
n-k+1), so each replicate of a quantile costs one Beta draw instead of n, and CIs stay cheap
at 100,000 requests per target.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

PERCENTILES: dict[str, float] = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}
BOOTSTRAP_DRAWS = 4000
CONFIDENCE = 0.95


def min_samples(p: float) -> int:
    """Fewest samples that put at least one observation beyond the p-quantile."""
    return math.ceil(round(1.0 / (1.0 - p), 9))


def supported(n: int, p: float) -> bool:
    """Whether n samples can give a p-quantile (at least one lies beyond it)."""
    return n >= min_samples(p)


def percentile(sorted_values: np.ndarray, p: float) -> float | None:
    """Linear-interpolated percentile (numpy's default, as vLLM bench uses), or None."""
    if not supported(len(sorted_values), p):
        return None
    return float(np.quantile(sorted_values, p))


def bootstrap_quantile(
    sorted_values: np.ndarray, p: float, rng: np.random.Generator, draws: int = BOOTSTRAP_DRAWS
) -> np.ndarray:
    """Bootstrap replicates of the nearest-rank p-quantile (see the module docstring)."""
    n = len(sorted_values)
    k = max(1, math.ceil(p * n))
    u = rng.beta(k, n - k + 1, size=draws)
    index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    return sorted_values[index]


def interval(replicates: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return float(low), float(high)


def percentile_ci(
    sorted_values: np.ndarray, p: float, confidence: float = CONFIDENCE
) -> tuple[float | None, float | None] | None:
    """CI of the p-quantile (see the module docstring), None when the percentile is
    unsupported; a side the sample cannot bound at this confidence is None."""
    n = len(sorted_values)
    if not supported(n, p):
        return None
    low, high = order_statistic_ranks(n, p, confidence)
    return (
        None if low is None else float(sorted_values[low]),
        None if high is None else float(sorted_values[high]),
    )


@functools.lru_cache(maxsize=256)
def order_statistic_ranks(n: int, p: float, confidence: float) -> tuple[int | None, int | None]:
    """0-based ranks of the equal-tailed order-statistic interval of the p-quantile.

    With B ~ Binomial(n, p) the count of samples below the quantile, x(r) ≤ q ⟺ B ≥ r and
    x(s) ≥ q ⟺ B < s (1-based ranks): take the largest r with P(B < r) ≤ α/2 and the
    smallest s with P(B ≥ s) ≤ α/2; either may not exist.
    """
    tail = (1.0 - confidence) / 2.0
    cdf = _binomial_cdf(n, p)
    r = int(np.searchsorted(cdf, tail, side="right"))  # how many k have P(B ≤ k) ≤ α/2
    k = int(np.searchsorted(cdf, 1.0 - tail, side="left"))  # first k: P(B ≤ k) ≥ 1 − α/2
    return (r - 1 if r >= 1 else None), (k if k < n else None)


def _binomial_cdf(n: int, p: float) -> np.ndarray:
    """P(B ≤ k) for k = 0..n, from log-pmf ratios (stable for n in the millions)."""
    k = np.arange(n, dtype=np.float64)
    steps = np.log(n - k) - np.log(k + 1) + math.log(p) - math.log1p(-p)
    log_pmf = np.concatenate([[0.0], np.cumsum(steps)]) + n * math.log1p(-p)
    pmf = np.exp(log_pmf - log_pmf.max())
    cdf = np.cumsum(pmf)
    return cdf / float(cdf[-1])


def describe(values: Sequence[float | None], ci: bool = True) -> dict[str, object]:
    """p50/p90/p99/p999/mean/count (+ ci95 per percentile): one summary.json metric block."""
    data = np.sort(np.asarray([v for v in values if v is not None], dtype=np.float64))
    block: dict[str, object] = {name: percentile(data, p) for name, p in PERCENTILES.items()}
    block["mean"] = float(data.mean()) if len(data) else None
    block["count"] = len(data)
    if ci:
        block["ci95"] = {name: percentile_ci(data, PERCENTILES[name]) for name in PERCENTILES}
    return block


@dataclass(frozen=True, slots=True)
class RelativeDifference:
    """(b - a) / a of one percentile, with its bootstrap CI; None fields when unsupported."""

    estimate: float | None
    low: float | None
    high: float | None

    @property
    def significant(self) -> bool:
        """The CI excludes zero."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def relative_difference(
    a: Sequence[float], b: Sequence[float], p: float, rng: np.random.Generator
) -> RelativeDifference:
    """How much b's p-quantile differs from a's, relative to a; independent samples."""
    sa = np.sort(np.asarray(a, dtype=np.float64))
    sb = np.sort(np.asarray(b, dtype=np.float64))
    qa, qb = percentile(sa, p), percentile(sb, p)
    if qa is None or qb is None or qa <= 0:
        return RelativeDifference(None, None, None)
    ra = bootstrap_quantile(sa, p, rng)
    rb = bootstrap_quantile(sb, p, rng)
    ok = ra > 0
    low, high = interval(rb[ok] / ra[ok] - 1.0)
    return RelativeDifference(qb / qa - 1.0, low, high)


def difference(
    a: Sequence[float], b: Sequence[float], p: float, rng: np.random.Generator
) -> tuple[float, float, float] | None:
    """b's p-quantile less a's, with its bootstrap CI (the values' unit); independent
    samples; None when either cannot support the quantile."""
    sa = np.sort(np.asarray(a, dtype=np.float64))
    sb = np.sort(np.asarray(b, dtype=np.float64))
    qa, qb = percentile(sa, p), percentile(sb, p)
    if qa is None or qb is None:
        return None
    low, high = interval(bootstrap_quantile(sb, p, rng) - bootstrap_quantile(sa, p, rng))
    return qb - qa, low, high


def meets_slo(figures: dict[str, float | None], slo: dict[str, float]) -> bool:
    """One successful request against the SLOs (keyed ttft, tpot, e2e).

    An undefined TPOT (a one-token answer) cannot miss; any other undefined figure does.
    """
    for name, limit in slo.items():
        value = figures.get(name)
        if value is None:
            if name == "tpot":
                continue
            return False
        if value > limit:
            return False
    return True


def mbu(
    tpot_s: float,
    weight_bytes: float,
    kv_bytes_per_token: float,
    mean_context_tokens: float,
    mean_streams: float,
    gpu_bandwidth_bytes_s: float,
    gpus: int,
) -> float:
    """Model bandwidth utilisation: bytes one decode step must read / TPOT / peak bandwidth."""
    step_bytes = weight_bytes + kv_bytes_per_token * mean_context_tokens * mean_streams
    return step_bytes / tpot_s / (gpu_bandwidth_bytes_s * gpus)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """How long the union of [start, end] intervals lasts: a target's blocks, or a session's
    calls (fan-out siblings overlap)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total
