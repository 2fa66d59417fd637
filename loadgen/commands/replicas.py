"""How many replicas of one candidate the traffic needs: capacity searches on the virtual
clock, each the very command `python -m loadgen capacity --target virtual:…` a person would
type (its argv is kept in plan.json), in its own directory.

One replica is searched first, from the traffic down to a floor of 1 / (8 x the bound on
replicas) of it; its capacity s (a multiple of the traffic: --by speed, or requests/s over
the traffic's rate) puts the need at about ceil(want / s) replicas. That many are searched
(starting at the level wanted), then one more while they fall short, or one fewer while
the estimate says it may do, until the fewest that hold it are pinned or the bound on
replicas is reached. Those searches have the level wanted as their floor (`--floor`): a
count that does not hold it is told so by its first probe, with no search below it that
nothing would read. A candidate that meets the SLOs at no level on one replica, even that
far below the traffic, meets them at no size: the SLO is missed by a request alone, not by
the load.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.capacity.search import PRECISION
from loadgen.commands import capacity
from loadgen.engine import flags
from loadgen.reports import capacity as capacity_report
from loadgen.runs.config import RunConfig

CapacityRequest = Callable[[Sequence[str]], "tuple[RunConfig, capacity.CapacityConfig] | int"]
PLAN_ONLY = (*flags.PLAN, "--rate", "--out")  # the plan's flags, not a capacity search's
MAX_SEARCHES = 6  # per candidate: one replica, then a few counts around the estimate


@dataclass(frozen=True, slots=True)
class Job:
    """One candidate to size, as a worker process receives it."""

    name: str
    spec: str
    args: str
    argv: tuple[str, ...]  # the plan's own flags (after `plan`)
    out: Path  # the candidate's directory
    rate: float | None  # the traffic's requests/s (None: a replay, searched by speed)
    headroom: float
    max_replicas: int
    # `python -m loadgen capacity`'s argv read as the command reads it (the command line's
    # own reader, handed down so that a search is the command a person would type)
    request: CapacityRequest


def capacity_argv(job: Job, replicas: int, start: float, floor: float) -> list[str]:
    """The capacity command for `replicas` of the candidate from `start` down to `floor`:
    the plan's workload, SLO and seed flags as given, its own flags left out."""
    kept, skip = [], False
    for word in job.argv:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if flag in PLAN_ONLY:
            skip = "=" not in word
            continue
        kept.append(word)
    out = job.out / f"replicas-{replicas}"
    target = ["--target", job.spec, "--virtual-replicas", str(replicas)]
    if job.args:
        target += ["--virtual-args", job.args]
    by = ["--by", "rate"] if job.rate is not None else ["--by", "speed"]
    levels = ["--start", f"{start:g}", "--floor", f"{floor:g}"]
    return ["capacity", *target, *by, *levels, *kept, "--out", str(out)]


def _share(result: dict[str, Any], rate: float | None) -> float | None:
    """The capacity as a multiple of the traffic."""
    (t,) = result["targets"].values()
    if t["capacity"] is None:
        return None
    return t["capacity"] / rate if rate is not None else t["capacity"]


def search(job: Job, replicas: int, want: float, floor: float) -> dict[str, Any]:
    """One capacity search from `want` down to `floor` (multiples of the traffic), written as
    the command writes it; its entry in plan.json."""
    level = job.rate or 1.0
    start = float(f"{want * level:.3g}")
    argv = capacity_argv(job, replicas, start, min(start, float(f"{floor * level:.3g}")))
    found = job.request(argv)
    if isinstance(found, int):
        raise ValueError(f"the capacity command refused {' '.join(argv)}")
    config, settings = found
    result = capacity.search(config, settings)
    capacity_report.write(config.out, result)
    (t,) = result["targets"].values()
    knee = [p for p in t["probes"] if p["level"] == t["capacity"] and p["repeat"] is None]
    return {
        "replicas": replicas,
        "share": _share(result, job.rate),
        "capacity": t["capacity"],
        "bracket": t["bracket"],
        "converged": t["converged"],
        "binding": t["binding"],
        "binding_slo": t["binding_slo"],
        "reason": t["reason"],
        "output_tokens_per_s": t["output_tokens_per_s"],
        "requests_per_s": t["requests_per_s"],
        "e2e_mean_s": knee[-1]["e2e_s"]["mean"] if knee else None,
        "probes": len(t["probes"]),
        "argv": ["python", "-m", "loadgen", *argv],
        "dir": str(config.out),
    }


def fewest(job: Job, want: float, searched: dict[int, dict[str, Any]]) -> int | None:
    """The fewest replicas (searched, or searched now) whose share holds `want`; None when
    the bound or the count of searches is reached first."""

    def holds(n: int) -> bool:
        if n not in searched:
            searched[n] = search(job, n, want, floor=want)
        share = searched[n]["share"]
        return share is not None and share >= want

    held = [n for n in searched if (searched[n]["share"] or 0) >= want]
    n = min(held) if held else _estimate(job, want, searched)
    while n is not None and len(searched) < MAX_SEARCHES + 1:
        if holds(n):
            if n == 1 or (n - 1 in searched and not holds(n - 1)):
                return n
            share = searched[n]["share"] * (n - 1) / n  # a perfect split over one fewer
            if n - 1 not in searched and share < want * (1 - PRECISION):
                return n
            n -= 1
        else:
            n = n + 1 if n < job.max_replicas else None
    return None


def _estimate(job: Job, want: float, searched: dict[int, dict[str, Any]]) -> int | None:
    """Replicas a perfect split would need, from the largest count searched that held some."""
    held = [(n, r["share"]) for n, r in searched.items() if r["share"]]
    if not held:
        return None
    n, share = max(held)
    return min(job.max_replicas, max(1, math.ceil(want * n / share - 1e-9)))


def size(job: Job) -> dict[str, Any]:
    """The candidate sized: plan.json's `sizing` of it. Its searches' lines go to
    search.log in its directory."""
    job.out.mkdir(parents=True, exist_ok=True)
    with open(job.out / "search.log", "w") as log, contextlib.redirect_stderr(log):
        return _size(job)


def _size(job: Job) -> dict[str, Any]:
    one = search(job, 1, 1.0, floor=1.0 / (8 * job.max_replicas))
    if one["share"] is None:
        return _sized([one], None, None, f"meets the SLOs at no size: {one['reason']}")
    searched: dict[int, dict[str, Any]] = {1: one}
    whole = fewest(job, 1.0, searched)
    wanted = fewest(job, 1.0 + job.headroom, searched) if whole is not None else None
    reason: str | None = None
    if whole is None or wanted is None:
        reason = f"needs more than {job.max_replicas} replicas (the bound)"
    return _sized([searched[n] for n in sorted(searched)], whole, wanted, reason)


def _sized(
    searches: list[dict[str, Any]], whole: int | None, wanted: int | None, reason: str | None
) -> dict[str, Any]:
    return {"replicas_1x": whole, "replicas": wanted, "reason": reason, "searches": searches}
