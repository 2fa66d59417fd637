"""Histogram bucket boundaries: one list per instrument, defined once.

Latency buckets grow geometrically by 15% over the ranges that matter (TTFT 50 ms–5 s,
TPOT 5–200 ms), so Prometheus' linear interpolation inside a bucket (histogram_quantile)
lands within 10% of the exact percentile there (tests/test_buckets.py shows it); outside
those ranges they grow by 50% to keep the series count down.
"""

from __future__ import annotations

import math


def geometric(low: float, high: float, ratio: float) -> tuple[float, ...]:
    """Boundaries from low up to (not including) high, each ~ratio times the last, 3 digits."""
    count = math.ceil(math.log(high / low) / math.log(ratio))
    bounds = []
    for i in range(count):
        value = low * ratio**i
        digits = 2 - math.floor(math.log10(value))
        bounds.append(round(value, digits))
    return tuple(dict.fromkeys(bounds))


def _join(*parts: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(sorted(set().union(*parts)))


LATENCY_S = _join(  # TTFT, TTFNT, E2E, time to first chunk
    geometric(0.001, 0.03, 1.5), geometric(0.03, 7.0, 1.15), geometric(7.0, 300.0, 1.5), (300.0,)
)
TOKEN_LATENCY_S = _join(  # TPOT, time per output chunk
    geometric(0.0005, 0.003, 1.5), geometric(0.003, 0.3, 1.15), geometric(0.3, 30.0, 1.5), (30.0,)
)
OVERHEAD_S = (*geometric(0.000_01, 1.0, 1.25), 1.0)
TOKENS = tuple(sorted({2**i for i in range(18)} | {3 * 2**i for i in range(17)}))  # 1 .. 196608
TOKENS_PER_CHUNK = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128)
FRACTION = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
LOOP_LAG_S = (*geometric(0.000_1, 2.0, 1.25), 2.0)  # the proxy's own event-loop lag
