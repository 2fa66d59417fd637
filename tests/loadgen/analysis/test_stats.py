"""The pure statistics core: percentiles, bootstrap CIs (with coverage), differences, SLOs, MBU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.analysis import stats


def test_min_samples_per_percentile() -> None:
    assert stats.min_samples(0.5) == 2
    assert stats.min_samples(0.9) == 10
    assert stats.min_samples(0.99) == 100
    assert stats.min_samples(0.999) == 1000


def test_unsupported_percentile_is_none_not_the_maximum() -> None:
    data = np.sort(np.arange(999, dtype=float))
    assert stats.percentile(data, 0.999) is None
    assert stats.percentile(data, 0.99) == pytest.approx(np.quantile(data, 0.99))
    assert stats.percentile(np.array([]), 0.5) is None
    assert stats.percentile_ci(data, 0.999) is None


def test_describe_block_shape_and_values() -> None:
    values = [float(v) for v in range(1, 201)] + [None]
    block = stats.describe(values)
    assert block["count"] == 200
    assert block["p50"] == pytest.approx(100.5)
    assert block["mean"] == pytest.approx(100.5)
    assert block["p999"] is None and block["ci95"]["p999"] is None
    low, high = block["ci95"]["p50"]
    assert low <= block["p50"] <= high
    assert "ci95" not in stats.describe(values, ci=False)
    empty = stats.describe([])
    assert empty["count"] == 0 and empty["mean"] is None and empty["p50"] is None


@given(
    st.lists(st.floats(0, 1e3, allow_nan=False), min_size=2, max_size=300),
    st.sampled_from(list(stats.PERCENTILES.values())),
)
@settings(max_examples=100, deadline=None)
def test_ci_brackets_lie_within_the_data_around_the_estimate(values: list[float], p: float) -> None:
    data = np.sort(np.asarray(values))
    ci = stats.percentile_ci(data, p)
    if len(data) < stats.min_samples(p):
        assert ci is None
        return
    low, high = ci
    estimate = stats.percentile(data, p)
    assert data[0] <= (estimate if low is None else low) <= estimate
    assert estimate <= (estimate if high is None else high) <= data[-1]


@pytest.mark.parametrize(
    ("n", "p", "bounded"),
    [(5, 0.5, (False, False)), (6, 0.5, (True, True)), (200, 0.99, (True, False)),
     (367, 0.99, (True, False)), (368, 0.99, (True, True)), (1000, 0.999, (True, False)),
     (3687, 0.999, (True, False)), (3688, 0.999, (True, True))],
)  # fmt: skip
def test_a_side_the_sample_cannot_bound_is_none(n: int, p: float, bounded: tuple) -> None:
    """P(all n samples below the quantile) = p^n: an upper bound needs p^n ≤ 2.5%."""
    low, high = stats.order_statistic_ranks(n, p, 0.95)
    assert (low is not None, high is not None) == bounded


def test_bootstrap_matches_a_resampling_bootstrap() -> None:
    """The Beta shortcut has the distribution of a brute-force resampled quantile."""
    rng = np.random.default_rng(2)
    data = np.sort(rng.lognormal(0, 0.5, 300))
    fast = stats.bootstrap_quantile(data, 0.9, rng, draws=20_000)
    resamples = rng.choice(data, size=(20_000, len(data)))
    k = math.ceil(0.9 * len(data)) - 1
    brute = np.partition(resamples, k, axis=1)[:, k]
    for q in (0.025, 0.5, 0.975):
        assert np.quantile(fast, q) == pytest.approx(np.quantile(brute, q), rel=0.01)


@pytest.mark.parametrize(("p", "n"), [(0.5, 200), (0.9, 500), (0.99, 400), (0.99, 2000)])
def test_ci_coverage_on_synthetic_data(p: float, n: int) -> None:
    """95% CIs of a lognormal's quantiles contain the true quantile at least 95% of the time,
    P99 of 400 samples (4 beyond it) included: where a bootstrap covered ~85%."""
    rng = np.random.default_rng(3)
    sigma = 0.6
    true = math.exp(sigma * _normal_ppf(p))
    trials = 300
    hits = 0
    for _ in range(trials):
        data = np.sort(rng.lognormal(0, sigma, n))
        low, high = stats.percentile_ci(data, p)
        hits += low <= true <= high
    coverage = hits / trials
    assert 0.93 <= coverage <= 0.995, coverage  # ± 2.5 standard errors of 300 trials


def _normal_ppf(p: float) -> float:
    """Inverse of the standard normal CDF by bisection (no scipy here)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def test_relative_difference_finds_a_real_shift_and_covers_it() -> None:
    rng = np.random.default_rng(4)
    hits = 0
    trials = 150
    for _ in range(trials):
        a = rng.lognormal(0, 0.3, 400)
        b = rng.lognormal(0, 0.3, 400) * 0.9  # b is 10% faster at every quantile
        diff = stats.relative_difference(a, b, 0.5, rng)
        hits += diff.low <= -0.1 <= diff.high
    assert 0.89 <= hits / trials <= 0.995
    a = rng.lognormal(0, 0.3, 2000)
    b = rng.lognormal(0, 0.3, 2000) * 0.8
    diff = stats.relative_difference(a, b, 0.5, rng)
    assert diff.significant and diff.estimate == pytest.approx(-0.2, abs=0.04)


def test_relative_difference_of_equal_distributions_is_not_significant() -> None:
    rng = np.random.default_rng(5)
    significant = sum(
        stats.relative_difference(
            rng.lognormal(0, 0.3, 500), rng.lognormal(0, 0.3, 500), 0.5, rng
        ).significant
        for _ in range(100)
    )
    assert significant <= 12  # about 5% false alarms expected


def test_relative_difference_unsupported() -> None:
    rng = np.random.default_rng(6)
    diff = stats.relative_difference([1.0] * 50, [2.0] * 50, 0.99, rng)
    assert diff.estimate is None and not diff.significant


def test_meets_slo() -> None:
    slo = {"ttft": 0.8, "tpot": 0.05}
    assert stats.meets_slo({"ttft": 0.8, "tpot": 0.05}, slo)
    assert not stats.meets_slo({"ttft": 0.81, "tpot": 0.01}, slo)
    assert not stats.meets_slo({"ttft": 0.1, "tpot": 0.051}, slo)
    assert stats.meets_slo({"ttft": 0.1, "tpot": None}, slo)  # a one-token answer
    assert not stats.meets_slo({"ttft": None, "tpot": 0.01}, slo)
    assert not stats.meets_slo({"ttft": 0.1, "e2e": None}, {"e2e": 5.0})


def test_mbu_worked_example() -> None:
    """7B fp16 (14 GB) at 14 ms/token on one 2 TB/s GPU is MBU 0.5 (the seeds' example)."""
    assert stats.mbu(0.014, 14e9, 0, 0, 0, 2e12, 1) == pytest.approx(0.5)
    # KV: 1,000 tokens of context × 10 streams × 1 MB/token adds 10 GB per step
    assert stats.mbu(0.014, 14e9, 1e6, 1000, 10, 2e12, 1) == pytest.approx(24e9 / 0.014 / 2e12)
    assert stats.mbu(0.02, 140e9, 0, 0, 0, 2e12, 4) == pytest.approx(140e9 / 0.02 / 8e12)
