"""histogram_quantile over our buckets lands within 10% of the exact percentile.

Samples with known distributions go through the proxy's real Prometheus histogram; the
quantile is then computed from the exposed buckets exactly as Prometheus'
histogram_quantile does (linear interpolation inside the bucket).
"""

from __future__ import annotations

import math

import numpy as np
import prometheus_client
import pytest

from latency_proxy.telemetry import buckets
from latency_proxy.telemetry.instruments import TPOT, TTFT, Instrument


def histogram_quantile(q: float, bounds: list[float], cumulative: list[float]) -> float:
    """Prometheus' algorithm (promql/quantile.go, bucketQuantile) for finite buckets."""
    total = cumulative[-1]
    rank = q * total
    index = next(i for i, c in enumerate(cumulative) if c >= rank)
    if index == len(bounds):
        return bounds[-1]
    start = 0.0 if index == 0 else bounds[index - 1]
    below = 0.0 if index == 0 else cumulative[index - 1]
    count = cumulative[index] - below
    return start + (bounds[index] - start) * (rank - below) / count


def observed_quantiles(spec, samples: np.ndarray, qs: list[float]) -> list[float]:
    registry = prometheus_client.CollectorRegistry()
    instrument = Instrument(spec, registry, None)
    for value in samples:
        instrument.record(float(value), ("chat", "m", "default"))
    bounds, cumulative = [], []
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                bounds.append(float(sample.labels["le"]))
                cumulative.append(sample.value)
    finite = [b for b in bounds if math.isfinite(b)]
    return [histogram_quantile(q, finite, cumulative) for q in qs]


QS = [0.5, 0.9, 0.99]


@pytest.mark.parametrize("median", [0.05, 0.08, 0.2, 0.5, 1.0, 2.0, 3.5])
@pytest.mark.parametrize("sigma", [0.1, 0.4])
def test_ttft_quantiles_within_10_percent(median: float, sigma: float) -> None:
    rng = np.random.default_rng(7)
    samples = rng.lognormal(math.log(median), sigma, 20_000)
    estimates = observed_quantiles(TTFT, samples, QS)
    for q, estimate in zip(QS, estimates, strict=True):
        exact = float(np.quantile(samples, q))
        if not 0.05 <= exact <= 5.0:
            continue  # outside the range the buckets promise
        assert estimate == pytest.approx(exact, rel=0.10), (q, exact, estimate)


@pytest.mark.parametrize("median", [0.005, 0.01, 0.02, 0.05, 0.1, 0.18])
def test_tpot_quantiles_within_10_percent(median: float) -> None:
    rng = np.random.default_rng(11)
    samples = rng.lognormal(math.log(median), 0.2, 20_000)
    for q, estimate in zip(QS, observed_quantiles(TPOT, samples, QS), strict=True):
        exact = float(np.quantile(samples, q))
        if not 0.005 <= exact <= 0.2:
            continue  # outside the range the buckets promise
        assert estimate == pytest.approx(exact, rel=0.10), (q, exact, estimate)


def test_a_constant_latency_is_not_smeared_beyond_10_percent() -> None:
    for value in (0.05, 0.3, 0.8, 4.9):
        estimate = observed_quantiles(TTFT, np.full(1000, value), [0.5])[0]
        assert estimate == pytest.approx(value, rel=0.10)


def test_bounds_are_increasing_and_cover_the_ranges() -> None:
    for bounds in (
        buckets.LATENCY_S,
        buckets.TOKEN_LATENCY_S,
        buckets.OVERHEAD_S,
        buckets.TOKENS,
        buckets.TOKENS_PER_CHUNK,
    ):
        assert list(bounds) == sorted(set(bounds))
    assert buckets.LATENCY_S[0] <= 0.05 and buckets.LATENCY_S[-1] >= 5
    assert buckets.TOKEN_LATENCY_S[0] <= 0.005 and buckets.TOKEN_LATENCY_S[-1] >= 0.2
