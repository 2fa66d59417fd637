"""A run in time slices: how each stretch of it went. Pure, no I/O.

A whole-run percentile hides when things went wrong; a replayed trace's load varies by the
minute, so its verdicts are per slice. Slices are `slice_s` long, from the target's first
measured window opening; a slice with nothing of the target's under way (another target's
block) is left out. Per slice: requests sent (intended send in it) and finished (ended in
it); the backlog at its end (sent so far minus finished so far: it grows while the server
falls behind); output tokens/s (each request's tokens spread evenly over its decode, first
token to end, counted where they fall); TTFT and TPOT P50/P90 of the requests sent in it;
and each SLO's verdict on them: its percentile among the slice's successful requests against
its limit (slo.check, as a whole run is judged), pass or fail, or "not judged" when the slice
has fewer requests than `min_requests` asks for that percentile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.analysis import stats
from loadgen.analysis.records import Phase, Record
from loadgen.analysis.slo import METRICS, Slos, check, named

MIN_JUDGED = 5  # requests a slice needs before it is judged at all (a percentile may need more)
PASS, FAIL, NOT_JUDGED = "pass", "fail", "not judged"
MAX_STRETCHES = 3  # failing stretches named per SLO in report.md; the rest counted


def min_requests(pct: str) -> int:
    """Fewest requests a slice is judged on at this percentile: MIN_JUDGED, or as many as
    the percentile needs to exist (P90: 10, P99: 100; stats.min_samples)."""
    return max(MIN_JUDGED, stats.min_samples(stats.PERCENTILES[pct]))


def _percentiles(values: np.ndarray) -> dict[str, float | int | None]:
    if not len(values):
        return {"p50": None, "p90": None, "count": 0}
    p50, p90 = np.quantile(values, [0.5, 0.9])
    return {"p50": float(p50), "p90": float(p90), "count": len(values)}


VERDICT = {True: PASS, False: FAIL, None: NOT_JUDGED}  # Check.held -> its word


def overall(verdicts: Iterable[str]) -> str:
    """A slice's verdict over its SLOs: fail if any failed, pass if every one held."""
    seen = set(verdicts)
    return FAIL if FAIL in seen else (NOT_JUDGED if NOT_JUDGED in seen else PASS)


def judge(values: Mapping[str, np.ndarray], slos: Slos) -> dict[str, dict[str, Any]]:
    """Each SLO on one slice's values (ttft_s, tpot_s, e2e_s of its successful requests)."""
    blocks = {}
    for metric in slos.limits:
        pct = slos.percentile(metric)
        data = np.sort(values[METRICS[metric]])
        enough = len(data) >= min_requests(pct)
        value = stats.percentile(data, stats.PERCENTILES[pct]) if enough else None
        blocks[METRICS[metric]] = {pct: value, "count": len(data)}
    return {
        c.metric: {
            "percentile": c.percentile,
            "limit_s": c.limit,
            "value_s": c.value,
            "count": c.count,
            "min_requests": min_requests(c.percentile),
            "verdict": VERDICT[c.held],
        }
        for c in check(slos, blocks)
    }


def slices(
    records: Sequence[Record], phases: Sequence[Phase], slice_s: float, slos: Slos
) -> list[dict[str, Any]]:
    """One target's measured records, sliced and judged against the SLOs; [] when it has none."""
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
    e2e = np.array([np.nan if r.e2e_s is None else r.e2e_s for r in measured])
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
        figures = {
            key: v[good & ~np.isnan(v)]
            for key, v in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e))
        }
        slo = judge(figures, slos)
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
                "ttft_s": _percentiles(figures["ttft_s"]),
                "tpot_s": _percentiles(figures["tpot_s"]),
                "slo": slo,
                "slo_verdict": overall(v["verdict"] for v in slo.values()),
            }
        )
    return out


def worst(found: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The slice with the highest TTFT P90 among those with enough requests to judge it."""
    judged = [s for s in found if s["ttft_s"]["count"] >= min_requests("p90")]
    return max(judged, key=lambda s: s["ttft_s"]["p90"]) if judged else None


def clock(seconds: float) -> str:
    """A time into the run as a clock reads it: 10:30, 1:02:00, 0:02.5."""
    minutes, secs = divmod(round(seconds, 1), 60)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{secs:02.0f}" if secs == int(secs) else f"{secs:04.1f}"
    return f"{hours}:{minutes:02d}:{text}" if hours else f"{minutes}:{text}"


def span(s: Mapping[str, Any]) -> str:
    return f"{clock(s['start_s'])}–{clock(s['end_s'])}"


def _ms(seconds: float) -> str:
    value = seconds * 1e3
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def _name(judged: Mapping[str, Any], metric: str) -> str:
    return named(metric, judged["percentile"])


def failures(s: Mapping[str, Any]) -> list[str]:
    """A slice's failed SLOs in words: "TTFT P90 1,240 ms > 800 ms"."""
    return [
        f"{_name(j, m)} {_ms(j['value_s'])} > {_ms(j['limit_s'])}"
        for m, j in (s.get("slo") or {}).items()
        if j["verdict"] == FAIL
    ]


def _stretches(failed: Sequence[Mapping[str, Any]], metric: str) -> str:
    """Consecutive failing slices as one stretch each: "10:30–11:00 (1,240 ms > 800 ms) and
    12:00–13:30 (3 slices, worst 1,100 ms)", the first MAX_STRETCHES named."""
    runs: list[list[Mapping[str, Any]]] = []
    for s in failed:
        if runs and math.isclose(runs[-1][-1]["end_s"], s["start_s"]):
            runs[-1].append(s)
        else:
            runs.append([s])
    words = []
    for run in runs[:MAX_STRETCHES]:
        judged = [s["slo"][metric] for s in run]
        top = max(j["value_s"] for j in judged)
        where = f"{clock(run[0]['start_s'])}–{clock(run[-1]['end_s'])}"
        limit = _ms(judged[0]["limit_s"])
        if len(run) == 1:
            words.append(f"{where} ({_ms(top)} > {limit})")
        else:
            words.append(f"{where} ({len(run)} slices, worst {_ms(top)} > {limit})")
    rest = runs[MAX_STRETCHES:]
    if rest:
        count = sum(len(run) for run in rest)
        words.append(f"{len(rest)} more stretch{'es' if len(rest) > 1 else ''} ({count} slices)")
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def slo_sentence(name: str, target: Mapping[str, Any]) -> str | None:
    """report.md's line on a target's slices against the SLOs: how many held, which failed
    where; None without slices (or from a summary before slices were judged)."""
    found = [s for s in target.get("slices") or [] if s.get("slo")]
    if not found:
        return None
    metrics = list(found[0]["slo"])
    unjudged = [s for s in found if s["slo_verdict"] == NOT_JUDGED]
    if len(unjudged) == len(found):
        needs = ", ".join(f"{_name(j, m)} needs {j['min_requests']}"
                          for m, j in found[0]["slo"].items())  # fmt: skip
        most = max(s["sent"] for s in found)
        return (
            f"{name}: no slice had enough requests to judge the SLOs by ({needs}; the most "
            f"sent in one was {most}): a longer --slice or an SLO at a lower percentile would"
        )
    held = sum(s["slo_verdict"] == PASS for s in found)
    parts = [f"SLOs held in {held} of {len(found)} slices"]
    for metric in metrics:
        failed = [s for s in found if s["slo"][metric]["verdict"] == FAIL]
        if failed:
            parts.append(f"{_name(failed[0]['slo'][metric], metric)} failed in "
                         f"{_stretches(failed, metric)}")  # fmt: skip
    if unjudged:
        needed = max(
            j["min_requests"]
            for s in unjudged
            for j in s["slo"].values()
            if j["verdict"] == NOT_JUDGED
        )
        parts.append(f"{len(unjudged)} not judged (fewer than {needed} requests)")
    return f"{name}: " + "; ".join(parts)


def sentence(name: str, target: dict[str, Any]) -> str | None:
    """report.md's line naming a target's worst slice, or None without slices."""
    found = target.get("slices")
    if not found:
        return None
    bad = worst(found)
    whole = target["metrics"]["ttft_s"].get("p90")
    if bad is None:
        return f"{name}: no slice had the {min_requests('p90')} requests a TTFT P90 needs"
    ratio = f", {bad['ttft_s']['p90'] / whole:.1f}x the run's" if whole else ""
    return (
        f"{name}: worst slice {span(bad)}: TTFT P90 {bad['ttft_s']['p90'] * 1e3:.0f} ms{ratio} "
        f"({bad['sent']} sent, {bad['output_tokens_per_s']:.0f} output tok/s, "
        f"backlog {bad['backlog']} at its end)"
    )
