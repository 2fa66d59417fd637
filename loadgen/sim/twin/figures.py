"""The figures a twin is judged by, read alike from a captured request and from the twin's
timing of it: the client's TTFT and TPOT, the server's own, and their percentiles. Pure,
no I/O.
"""

from __future__ import annotations

import math

from loadgen.sim.twin import deployment
from loadgen.sim.twin.capture import Captured


def client_figures(r: Captured | deployment.Timing) -> dict[str, float | None]:
    """TTFT and TPOT as the client saw them (a capture's) or would (the twin's)."""
    return {"ttft": r.ttft, "tpot": r.tpot}


def server_figures(r: Captured | deployment.Timing) -> dict[str, float | None]:
    """The server's own TTFT (queue and prefill) and TPOT (decode per token after the
    first), of a captured request (None without its timings) or of the twin's."""
    queue: float | None
    prefill: float | None
    decode: float | None
    if isinstance(r, deployment.Timing):
        queue, prefill, decode = r.queue, r.prefill, r.decode
    else:
        queue, prefill, decode = r.server_queue, r.server_prefill, r.server_decode
    n = r.output_tokens
    return {
        "ttft": None if queue is None or prefill is None else queue + prefill,
        "tpot": None if decode is None or n < 2 else decode / (n - 1),
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between order statistics."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)
