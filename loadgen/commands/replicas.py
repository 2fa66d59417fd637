"""How many replicas of one candidate the traffic needs: capacity searches on the virtual
clock, each the very command `python -m loadgen capacity --target virtual:…` a person would
type (its argv is kept in plan.json), in its own directory.

One replica is searched first from the traffic up (a multiple of it: --by speed, or
requests/s over the traffic's rate), its floor at the traffic: one probe when it falls
short. Counts are then checked, each by the capacity command held to the one level wanted
(`--floor` and `--ceiling` there: a probe, extended while undecided, says whether that many
hold it): two, twice as many while they fall short, then halving the gap between the most
that fell short and the fewest that held, as more replicas never hold less. One replica's
capacity below the traffic would not say where to start: several replicas behind one router
often hold far more than a perfect split of one, and searching it costs more probes, each
slower (few sequences a step), than the doublings it could spare. The fewest that hold it
is then searched in full from the level wanted up (its capacity, its cost per token and
what binds). When the bound on replicas falls short, one replica is checked at 1 / (8 x the
bound) of the traffic: a candidate that misses the SLOs even there meets them at no size
(a request alone misses them, not the load).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.commands import capacity
from loadgen.engine import flags
from loadgen.reports import capacity as capacity_report
from loadgen.runs.config import RunConfig

CapacityRequest = Callable[[Sequence[str]], "tuple[RunConfig, capacity.CapacityConfig] | int"]
PLAN_ONLY = (*flags.PLAN, "--rate", "--out")  # the plan's flags, not a capacity search's


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


def capacity_argv(
    job: Job, replicas: int, start: float, floor: float, ceiling: float | None = None
) -> list[str]:
    """The capacity command for `replicas` of the candidate from `start`, down to `floor` and
    up to `ceiling`: the plan's workload, SLO and seed flags as given, its own flags left
    out. A check of one level has its own folder beside the count's full search."""
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
    out = job.out / (f"replicas-{replicas}" + (f"-at-{start:g}" if ceiling is not None else ""))
    target = ["--target", job.spec, "--virtual-replicas", str(replicas)]
    if job.args:
        target += ["--virtual-args", job.args]
    by = ["--by", "rate"] if job.rate is not None else ["--by", "speed"]
    levels = ["--start", f"{start:g}", "--floor", f"{floor:g}"]
    levels += ["--ceiling", f"{ceiling:g}"] if ceiling is not None else []
    # a plan's probes are many and rarely opened: no PNGs, unless the plan's flags ask
    return ["capacity", *target, *by, *levels, "--no-probe-pngs", *kept, "--out", str(out)]


def _share(result: dict[str, Any], rate: float | None) -> float | None:
    """The capacity as a multiple of the traffic."""
    (t,) = result["targets"].values()
    if t["capacity"] is None:
        return None
    return t["capacity"] / rate if rate is not None else t["capacity"]


def search(job: Job, replicas: int, want: float) -> dict[str, Any]:
    """One capacity search from `want` (a multiple of the traffic) up, its floor there: one
    probe when that many fall short of it. Written as the command writes it; its entry in
    plan.json."""
    start = _level(job, want)
    return _ran(job, replicas, capacity_argv(job, replicas, start, start), "search")


def check(job: Job, replicas: int, want: float) -> dict[str, Any]:
    """Whether `replicas` hold `want`: the capacity command held to that one level."""
    start = _level(job, want)
    return _ran(job, replicas, capacity_argv(job, replicas, start, start, start), "check")


def _level(job: Job, share: float) -> float:
    """The capacity command's level for a multiple of the traffic (requests/s with --rate),
    to the three figures its argv shows."""
    return float(f"{share * (job.rate or 1.0):.3g}")


def _ran(job: Job, replicas: int, argv: list[str], kind: str) -> dict[str, Any]:
    """The capacity command of `argv`, written as the command writes it; its plan.json entry."""
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
        "kind": kind,
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


class _Counts:
    """What is known of each count against each level wanted, checks run as needed."""

    def __init__(self, job: Job, one: dict[str, Any]) -> None:
        self.job = job
        self.one = one
        self.checks: dict[tuple[int, float], dict[str, Any]] = {}

    def holds(self, n: int, want: float) -> bool:
        if n == 1 and want >= 1.0:  # one replica's search answers from the traffic up
            # at the level its argv shows (by rate: requests/s to three figures)
            capacity = self.one["capacity"]
            return capacity is not None and capacity >= _level(self.job, want)
        if (n, want) not in self.checks:
            self.checks[(n, want)] = check(self.job, n, want)
        return self.checks[(n, want)]["share"] is not None

    def fewest(self, want: float, short: int = 0) -> int | None:
        """The fewest replicas that hold `want`, more than `short` (known to fall short);
        None past the bound."""
        if self.holds(1, want):
            return 1
        short, held = max(short, 1), None
        n = min(self.job.max_replicas, short + 1)
        while held is None or held - short > 1:
            if self.holds(n, want):
                held = n
            else:
                short = n
                if held is None and n == self.job.max_replicas:
                    return None
            n = min(self.job.max_replicas, 2 * n) if held is None else (short + held) // 2
        return held


def size(job: Job) -> dict[str, Any]:
    """The candidate sized: plan.json's `sizing` of it. Its searches' lines go to
    search.log in its directory."""
    job.out.mkdir(parents=True, exist_ok=True)
    with open(job.out / "search.log", "w") as log, contextlib.redirect_stderr(log):
        return _size(job)


def _size(job: Job) -> dict[str, Any]:
    one = search(job, 1, 1.0)
    counts = _Counts(job, one)
    whole = counts.fewest(1.0)
    want = 1.0 + job.headroom
    wanted = whole
    if whole is not None and want > 1.0:  # fewer than `whole` fall short of it already
        wanted = counts.fewest(want, whole - 1)
    full = {1: one}
    if wanted is not None and wanted > 1:  # the count bought, searched in full from `want` up
        full[wanted] = search(job, wanted, want)
    reason: str | None = None
    if whole is None or wanted is None:
        reason = f"needs more than {job.max_replicas} replicas (the bound)"
    least = 1.0 / (8 * job.max_replicas)
    if whole is None and not counts.holds(1, least):  # not even far below the traffic
        reason = f"meets the SLOs at no size: {counts.checks[(1, least)]['reason']}"
    checked = [c for _, c in sorted(counts.checks.items())]
    ran = [*full.values(), *checked]
    searches = sorted(ran, key=lambda s: (s["replicas"], s["kind"] == "check"))  # full first
    return _sized(searches, whole, wanted, reason)


def _sized(
    searches: list[dict[str, Any]], whole: int | None, wanted: int | None, reason: str | None
) -> dict[str, Any]:
    return {"replicas_1x": whole, "replicas": wanted, "reason": reason, "searches": searches}
