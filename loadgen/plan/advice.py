"""A plan's answer: each sized candidate's cost, the ranking, which candidates cannot be told
apart, the cost–headroom front, and the sentence. Pure: plan.json's dictionaries in.

Cost is whole: the replicas' GPUs at their hourly price, over the output tokens the
deployment serves at its capacity (the most of this traffic it holds with every SLO met),
with no share set aside for input tokens. A candidate's uncertainty (basis.py) is on its
capacity; with a perfect split over replicas it becomes a range of replicas, and so of cost:
two candidates whose cost ranges overlap cannot be told apart by this plan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.slo import Slos


def chosen(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The search of the replicas a candidate is priced at (its full one, not its check)."""
    return next(
        (
            s
            for s in entry["searches"]
            if s["replicas"] == entry["replicas"] and s.get("kind") != "check"
        ),
        None,
    )


def replica_range(replicas: int, share: float, want: float, uncertainty: float) -> list[int]:
    """Replicas needed if the true capacity were `uncertainty` higher or lower than found
    (`share` of the traffic on `replicas`), split perfectly; the found count lies inside."""
    per = share / replicas
    low = math.ceil(want / (per * (1 + uncertainty)) - 1e-9)
    high = math.ceil(want / (per * max(1e-9, 1 - uncertainty)) - 1e-9)
    return [max(1, min(low, replicas)), max(high, replicas)]


def priced(entry: dict[str, Any], want: float, watts: float | None) -> None:
    """A sized candidate's cost figures, in place: $/hour, $ per million output tokens at
    its capacity, J per output token (`watts`: per GPU at the knee), its cost range."""
    search = chosen(entry)
    assert search is not None and search["share"] is not None, "a ranked candidate was sized"
    gpus = entry["gpus"] * entry["replicas"]
    usd_per_hour = gpus * entry["usd_per_gpu_hour"]
    tokens = search["output_tokens_per_s"]
    entry["share"] = search["share"]
    entry["headroom"] = search["share"] - 1
    entry["binding_slo"] = search["binding_slo"]
    entry["binding"] = search["binding"]
    entry["usd_per_hour"] = usd_per_hour
    entry["usd_per_mtok_output"] = usd_per_hour / (tokens * 3600) * 1e6 if tokens else None
    entry["joules_per_output_token"] = gpus * watts / tokens if tokens and watts else None
    span = replica_range(entry["replicas"], search["share"], want, entry["basis"]["uncertainty"])
    entry["replica_range"] = span
    entry["usd_per_hour_range"] = [n * entry["gpus"] * entry["usd_per_gpu_hour"] for n in span]


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return max(a[0], b[0]) <= min(a[1], b[1])


def rank(entries: list[dict[str, Any]]) -> list[str]:
    """The sized candidates by $/hour (then $ per Mtok out), each told which others it
    cannot be told apart from; their names, cheapest first."""
    ranked = sorted(
        (e for e in entries if e.get("usd_per_hour") is not None),
        key=lambda e: (e["usd_per_hour"], e["usd_per_mtok_output"] or math.inf, e["name"]),
    )
    for i, e in enumerate(ranked):
        e["rank"] = i + 1
        e["tied_with"] = [
            o["name"]
            for o in ranked
            if o is not e and overlap(e["usd_per_hour_range"], o["usd_per_hour_range"])
        ]
    return [e["name"] for e in ranked]


def front(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every searched deployment that met the SLOs at the traffic (candidate, replicas,
    $/hour, headroom), and whether none cheaper has as much headroom (the Pareto front). A
    count only checked at one level has no headroom figure: it is left out."""
    points = [
        {
            "name": e["name"],
            "replicas": s["replicas"],
            "usd_per_hour": s["replicas"] * e["gpus"] * e["usd_per_gpu_hour"],
            "headroom": s["share"] - 1,
        }
        for e in entries
        if e.get("usd_per_hour") is not None
        for s in e["searches"]
        if s.get("kind") != "check" and s["share"] is not None and s["share"] >= 1
    ]
    for p in points:
        p["front"] = not any(
            q is not p
            and q["usd_per_hour"] <= p["usd_per_hour"]
            and q["headroom"] >= p["headroom"]
            and (q["usd_per_hour"], q["headroom"]) != (p["usd_per_hour"], p["headroom"])
            for q in points
        )
    return sorted(points, key=lambda p: (p["usd_per_hour"], -p["headroom"]))


def _money(usd: float) -> str:
    return f"${usd:,.2f}" if usd < 100 else f"${usd:,.0f}"


def deployment(entry: Mapping[str, Any]) -> str:
    """ "3 replicas of llama-70b-awq-tp4-a100 (4×A100-SXM4-80GB TP4 AWQ)"."""
    n = entry["replicas"]
    gpu = entry["gpu"].removeprefix("NVIDIA ")
    shape = f"{entry['gpus']}×{gpu} TP{entry['gpus']} {entry['dtype'].upper()}"
    said = f"{'1 replica' if n == 1 else f'{n} replicas'} of {entry['name']} ({shape})"
    return said


def _figures(entry: Mapping[str, Any]) -> str:
    said = f"{_money(entry['usd_per_hour'])}/h"
    if entry["usd_per_mtok_output"] is not None:
        said += f", {_money(entry['usd_per_mtok_output'])} per Mtok out"
    return f"{said} (predicted from {entry['basis']['said']})"


def sentence(result: Mapping[str, Any]) -> str:
    """ "Cheapest that meets TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90) on this traffic: …;
    next: …"."""
    slo = result["slo"]
    slos = Slos(
        {m: v["limit_s"] for m, v in slo.items()}, {m: v["percentile"] for m, v in slo.items()}
    )
    grown = f" grown {1 + result['headroom']:g}x" if result["headroom"] else ""
    head = f"Cheapest that meets {slos.describe()} on this traffic{grown}"
    by_name = {e["name"]: e for e in result["candidates"]}
    ranking = [by_name[n] for n in result["ranking"]]
    if not ranking:
        return f"{head}: none of the {len(by_name)} candidates ({_why_none(result)})."
    best = ranking[0]
    said = f"{head}: {deployment(best)}, {_figures(best)}"
    if len(ranking) > 1:
        nxt = ranking[1]
        said += f"; next: {deployment(nxt)}, {_figures(nxt)}"
        if nxt["name"] in best["tied_with"]:
            said += ": the two cannot be told apart"
    return said + "."


def _why_none(result: Mapping[str, Any]) -> str:
    counts: dict[str, int] = {}
    for e in result["candidates"]:
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    return ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
