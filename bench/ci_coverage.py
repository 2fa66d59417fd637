"""How often loadgen's 95% percentile intervals cover the true percentile, next to a bootstrap's.

Draws `--trials` lognormal samples of n values (σ = 0.6, a typical latency spread) and counts
how often each interval contains the distribution's true p-quantile: the order-statistic
interval loadgen reports (`ci95` in summary.json) and the percentile bootstrap (Beta
shortcut) that `compare` still uses for differences. A 95% interval should cover ≥ 95%.

    .venv/bin/python bench/ci_coverage.py [--trials 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
from statistics import NormalDist

import numpy as np

from loadgen.analysis import stats

CELLS = ((0.5, 50), (0.5, 200), (0.9, 100), (0.9, 500), (0.99, 200), (0.99, 400), (0.99, 2000),
         (0.999, 4000))  # fmt: skip
SIGMA = 0.6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"lognormal σ={SIGMA}, {args.trials} trials per cell; coverage of 95% intervals")
    print("| p | n | beyond p | order statistics | unbounded side | bootstrap |")
    print("|---|---|---|---|---|---|")
    for p, n in CELLS:
        true = math.exp(SIGMA * NormalDist().inv_cdf(p))
        exact = unbounded = boot = 0
        for _ in range(args.trials):
            data = np.sort(rng.lognormal(0.0, SIGMA, n))
            low, high = stats.percentile_ci(data, p)
            unbounded += low is None or high is None
            exact += (low is None or low <= true) and (high is None or true <= high)
            b_low, b_high = stats.interval(stats.bootstrap_quantile(data, p, rng))
            boot += b_low <= true <= b_high
        t = args.trials
        print(f"| {p} | {n} | {n * (1 - p):.0f} | {exact / t:.3f} | {unbounded / t:.0%} "
              f"| {boot / t:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
