"""Arrival processes (rate and dispersion) and the interleaved block plan."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from loadgen.engine.schedule import Block, arrivals, plan, shard_count, split


def take(rate: float, kind: str, n: int, seed: int = 0) -> np.ndarray:
    gen = arrivals(rate, kind, np.random.default_rng(seed))
    return np.fromiter(itertools.islice(gen, n), float)


def dispersion(offsets: np.ndarray, window_s: float) -> float:
    """Variance / mean of arrival counts in fixed windows: 1 for Poisson, 0 for constant."""
    counts = np.bincount((offsets // window_s).astype(int))[:-1]  # the last window is partial
    return float(counts.var() / counts.mean())


@pytest.mark.parametrize("kind", ["poisson", "constant", "gamma"])
def test_mean_rate(kind: str) -> None:
    offsets = take(50.0, kind, 20_000)
    assert np.all(np.diff(offsets) >= 0)
    assert len(offsets) / offsets[-1] == pytest.approx(50.0, rel=0.03)


def test_dispersion_of_each_process() -> None:
    assert dispersion(take(50.0, "poisson", 50_000), 1.0) == pytest.approx(1.0, abs=0.15)
    assert dispersion(take(50.0, "constant", 50_000), 1.0) < 0.05
    # gamma shape 0.5: gaps have CV² = 2, so counts in long windows have dispersion ≈ 2
    assert dispersion(take(50.0, "gamma", 50_000), 1.0) == pytest.approx(2.0, rel=0.2)


def test_poisson_gaps_are_exponential() -> None:
    gaps = np.diff(take(10.0, "poisson", 20_000))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert np.mean(gaps < 0.1) == pytest.approx(1 - np.exp(-1), abs=0.02)


def test_arrivals_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        next(arrivals(0, "poisson", np.random.default_rng()))
    with pytest.raises(ValueError):
        next(arrivals(1, "weibull", np.random.default_rng()))


def test_seeded_arrivals_repeat() -> None:
    assert np.array_equal(take(5, "poisson", 100, seed=7), take(5, "poisson", 100, seed=7))


def test_plan_interleaves_targets_with_warmup_first() -> None:
    blocks = plan(["A", "B"], 3, 2.0, 30.0, None)
    assert [(b.target, b.index) for b in blocks] == [
        ("A", 0),
        ("B", 0),
        ("A", 1),
        ("B", 1),
        ("A", 2),
        ("B", 2),
    ]
    assert [b.warmup_s for b in blocks] == [2.0] * 6  # later blocks: the cap of their ramp
    assert all(b.duration_s == 10.0 and b.requests is None for b in blocks)


def test_plan_splits_requests_exactly() -> None:
    blocks = plan(["A"], 3, 0.0, None, 10)
    assert [b.requests for b in blocks] == [4, 3, 3]
    assert plan(["A"], 3, 1.0, None, 1) == [Block("A", 0, 1.0, None, 1)]
    with pytest.raises(ValueError):
        plan(["A"], 1, 0.0, None, None)


def test_split_and_shards() -> None:
    assert split(10, 4) == [3, 3, 2, 2]
    assert sum(shard_count(1000, i, 7) for i in range(7)) == 1000
