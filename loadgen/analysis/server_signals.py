"""What the servers said beside the timings (summary.json's `signals` and `gpu`): reasoning,
the prefix cache and stalls from the requests, memory and power from the GPUs. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from loadgen.analysis import stats
from loadgen.analysis.records import GpuSample, Record


def signals(ok: Sequence[Record]) -> dict[str, Any]:
    """What the servers said about the requests: reasoning, the prefix cache, stalls. A
    figure over the requests that carried it; None when none did."""
    reasoned = [r for r in ok if r.reasoning_tokens is not None and r.output_tokens]
    cached = [r for r in ok if r.cached_tokens is not None and r.input_tokens]
    streams = [r for r in ok if r.stalls is not None]
    input_tokens = sum(r.input_tokens or 0 for r in cached)
    return {
        "reasoning": {
            "requests": len(reasoned),
            "share": (
                sum(r.reasoning_tokens or 0 for r in reasoned)
                / sum(r.output_tokens or 0 for r in reasoned)
                if reasoned
                else None
            ),
            "tokens": stats.describe([r.reasoning_tokens for r in reasoned], ci=False),
            "reasoning_s": stats.describe(
                [r.reasoning_s for r in ok if r.reasoning_s is not None], ci=False
            ),
        },
        "cache": {
            "requests": len(cached),
            "hit_fraction": (
                sum(r.cached_tokens or 0 for r in cached) / input_tokens if input_tokens else None
            ),
            "requests_with_hits": sum(1 for r in cached if r.cached_tokens),
        },
        "stalls": {
            "streams": len(streams),
            "stalls": sum(r.stalls or 0 for r in streams),
            "streams_with_stalls": sum(1 for r in streams if r.stalls),
            "max_itl_s": stats.describe(
                [r.max_itl_s for r in streams if r.max_itl_s is not None], ci=False
            ),
        },
    }


def gpus(samples: Iterable[GpuSample]) -> dict[str, Any] | None:
    """Each GPU's peak memory and mean power over the samples; None without any."""
    per_gpu: dict[str, dict[str, list[float]]] = {}
    for s in samples:
        entry = per_gpu.setdefault(f"{s.source} gpu={s.gpu}", {"memory": [], "power": []})
        if s.memory_mib is not None:
            entry["memory"].append(s.memory_mib)
        if s.power_w is not None:
            entry["power"].append(s.power_w)
    if not per_gpu:
        return None
    gpus = {
        key: {
            "peak_memory_mib": max(v["memory"]) if v["memory"] else None,
            "mean_power_w": float(np.mean(v["power"])) if v["power"] else None,
        }
        for key, v in per_gpu.items()
    }
    peaks = [g["peak_memory_mib"] for g in gpus.values() if g["peak_memory_mib"] is not None]
    powers = [g["mean_power_w"] for g in gpus.values() if g["mean_power_w"] is not None]
    return {
        "gpus": gpus,
        "peak_memory_mib": max(peaks) if peaks else None,
        "mean_power_w_total": float(sum(powers)) if powers else None,
    }
