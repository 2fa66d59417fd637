"""A run in time slices: how each stretch of it went. Pure, no I/O.

A whole-run percentile hides when things went wrong; a replayed trace's load varies by the
minute, so its verdicts are per slice. Slices are `slice_s` long, from the target's first
measured window opening; a slice with nothing of the target's under way (another target's
block) is left out. Per slice: requests sent (intended send in it) and finished (ended in
it); the backlog at its end (sent so far minus finished so far: it grows while the server
falls behind); output tokens/s (each request's tokens spread evenly over its decode, first
token to end, counted where they fall); TTFT and TPOT P50/P90 of the requests sent in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.records import Phase, Record

MIN_JUDGED = 5  # requests a slice needs before it can be the worst


def _percentiles(values: np.ndarray) -> dict[str, float | int | None]:
    if not len(values):
        return {"p50": None, "p90": None, "count": 0}
    p50, p90 = np.quantile(values, [0.5, 0.9])
    return {"p50": float(p50), "p90": float(p90), "count": len(values)}


def slices(records: Sequence[Record], phases: Sequence[Phase], slice_s: float) -> list[dict]:
    """One target's measured records, sliced; [] when it has none."""
    measured = [r for r in records if not r.excluded]
    if not phases or not measured:
        return []
    sent_at = np.array([r.intended_at for r in measured])
    end_at = np.array([r.end_at for r in measured])
    ok = np.array([r.ok for r in measured])
    # each successful request's decode, first token to end, and its tokens spread over it
    first = np.array([r.intended_at + (r.ttft_s or 0.0) for r in measured])
    tokens = np.array(
        [(r.output_tokens or 0) if r.ok and r.ttft_s is not None else 0 for r in measured]
    )
    ttft = np.array([np.nan if r.ttft_s is None else r.ttft_s for r in measured])
    tpot = np.array([np.nan if r.tpot_s is None else r.tpot_s for r in measured])
    origin = min(p.start_at for p in phases)
    last = max(float(end_at.max()), max(p.busy[1] for p in phases))
    out = []
    for k in range(max(1, math.ceil((last - origin) / slice_s))):
        start, end = origin + k * slice_s, origin + (k + 1) * slice_s
        if not np.any((sent_at < end) & (end_at >= start)):
            continue  # nothing of this target's was under way
        sent = (sent_at >= start) & (sent_at < end)
        overlap = np.clip(np.minimum(end, end_at) - np.maximum(start, first), 0.0, None)
        span = end_at - first
        instant = (span <= 0) & (end_at >= start) & (end_at < end)
        share = np.where(span > 0, overlap / np.where(span > 0, span, 1.0), instant)
        good = sent & ok
        out.append(
            {
                "start_s": k * slice_s,
                "end_s": (k + 1) * slice_s,
                "start_at": start,
                "sent": int(sent.sum()),
                "finished": int(((end_at >= start) & (end_at < end)).sum()),
                "failed": int((sent & ~ok).sum()),
                "backlog": int((sent_at < end).sum() - (end_at < end).sum()),
                "output_tokens_per_s": float((tokens * share).sum()) / slice_s,
                "ttft_s": _percentiles(ttft[good & ~np.isnan(ttft)]),
                "tpot_s": _percentiles(tpot[good & ~np.isnan(tpot)]),
            }
        )
    return out


def worst(found: Sequence[dict]) -> dict | None:
    """The slice with the highest TTFT P90 among those with enough requests to judge."""
    judged = [s for s in found if s["ttft_s"]["count"] >= MIN_JUDGED]
    return max(judged, key=lambda s: s["ttft_s"]["p90"]) if judged else None


def sentence(name: str, target: dict[str, Any]) -> str | None:
    """report.md's line naming a target's worst slice, or None without slices."""
    found = target.get("slices")
    if not found:
        return None
    bad = worst(found)
    whole = target["metrics"]["ttft_s"].get("p90")
    if bad is None:
        return f"{name}: no slice had {MIN_JUDGED} requests to judge by"
    span = f"{bad['start_s']:g}–{bad['end_s']:g} s"
    ratio = f", {bad['ttft_s']['p90'] / whole:.1f}x the run's" if whole else ""
    return (
        f"{name}: worst slice {span}: TTFT P90 {bad['ttft_s']['p90'] * 1e3:.0f} ms{ratio} "
        f"({bad['sent']} sent, {bad['output_tokens_per_s']:.0f} output tok/s, "
        f"backlog {bad['backlog']} at its end)"
    )
