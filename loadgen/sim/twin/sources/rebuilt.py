"""Arrivals rebuilt from a run's recorded settings, for a file that kept no send times: the
open-loop schedule vLLM's `bench serve` draws. Pure.

vLLM draws each gap from a gamma distribution of shape `burstiness` and mean 1/rate (a
Poisson process at burstiness 1; evenly spaced at infinity), then scales the schedule so
the last request is due at n/rate. The draws here are Python's, seeded, not numpy's: the
schedule is one like vLLM's, not the very one, which is why such a file is fitted by its
percentiles and not request by request.
"""

from __future__ import annotations

import math
import random


def arrivals(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """n send times in seconds from the run's start."""
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        gaps = [1.0 / rate] * n
    else:
        rng = random.Random(seed)
        gaps = [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(n)]
    at, total = [], 0.0
    for gap in gaps:
        total += gap
        at.append(total)
    scale = (n / rate) / total if total > 0 else 1.0
    return [t * scale for t in at]
