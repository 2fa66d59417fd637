"""Records in, summary.json out. Pure, no I/O: merge and run.py both call `summarize`.

Keys under targets.<name> are a contract (docs/reference/summary-json.md). Each target's
throughput is over its own active time (the union of its blocks), so interleaving does not
halve anyone's rate.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from latency_proxy.measure.coalescing import stream_shape
from loadgen.analysis import (
    consistency,
    cost,
    quality,
    server_metrics,
    sessions,
    slices,
    stats,
    steady,
)
from loadgen.analysis.compat import compat
from loadgen.analysis.records import (
    FIRST_N,
    UNFINISHED,
    GpuSample,
    Phase,
    Record,
    RunData,
    SummarySettings,
)
from loadgen.analysis.server_metrics import ServerWindow
from loadgen.analysis.server_signals import gpus, signals
from loadgen.analysis.stats import union_seconds

# the client's CPU share over a block (a core's) from which its own work explains its lag
CLIENT_BUSY = 0.8
LATENCY_METRICS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "time_to_first_chunk_s",
    "ttf3t_s",
    "answer_ttft_s",
    "server_queue_s",
    "server_ttft_s",
    "server_decode_s",
)


def _within(at: float, intervals: Sequence[tuple[float, float]]) -> bool:
    return any(start <= at <= end for start, end in intervals)


def _starved(cpu: float | None) -> str | None:
    """Why a client whose own work used little CPU still ran late: the machine's other
    processes (a server on the same host) took the CPU it waited for. None when the client
    was busy itself, or its CPU was not measured."""
    if cpu is None or cpu >= CLIENT_BUSY:
        return None
    return (
        f"the client itself used {cpu:.0%} of a core: other processes on its machine took "
        "the CPU it waited for, not its own work"
    )


def _lag_block(values: Sequence[float]) -> dict[str, float | int | None]:
    data = np.asarray(values, dtype=np.float64)
    if not len(data):
        return {"p50": None, "p99": None, "max": None, "count": 0}
    p50, p99 = np.quantile(data, [0.5, 0.99])
    return {"p50": float(p50), "p99": float(p99), "max": float(data.max()), "count": len(data)}


def figures(record: Record, metric: str) -> list[float]:
    """One request's values of a metric: its ITL gaps, or its one figure when defined."""
    if metric == "itl_s":
        return record.itl_s
    value = record.ttfnt_s.get(str(FIRST_N)) if metric == "ttf3t_s" else getattr(record, metric)
    return [] if value is None else [value]


def _target(name: str, data: RunData) -> dict[str, Any]:
    """One target's block at one load level (`data` holds that level's share alone)."""
    records, phases, settings = data.records, data.phases, data.settings
    active = union_seconds((p.start_at, p.end_at) for p in phases if p.target == name)
    intervals = [p.busy for p in phases if p.target == name]
    measured = [r for r in records if r.target == name and not r.excluded]
    ok = [r for r in measured if r.ok]
    unfinished = [r for r in measured if r.error == UNFINISHED]
    failed = [r for r in measured if not r.ok and r.error != UNFINISHED]
    metrics = {
        metric: stats.describe([v for r in ok for v in figures(r, metric)])
        for metric in LATENCY_METRICS
    }
    metrics["input_tokens"] = stats.describe([r.input_tokens for r in ok], ci=False)
    metrics["output_tokens"] = stats.describe([r.output_tokens for r in ok], ci=False)
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    good = sum(
        stats.meets_slo({"ttft": r.ttft_s, "tpot": r.tpot_s, "e2e": r.e2e_s}, settings.slo)
        for r in ok
    )
    send_lag = _lag_block([r.send_lag_s for r in measured])
    loop = _lag_block([lag for at, lag in data.loop_lag if _within(at, intervals)])
    cpu = max((p.client_cpu for p in phases if p.target == name and p.client_cpu), default=None)
    reasons = _invalid(phases, bool(ok), send_lag, loop, cpu, settings)
    per_s = (lambda n: n / active) if active > 0 else (lambda n: None)
    summary: dict[str, Any] = {
        "metrics": metrics,
        "requests": {
            "ok": len(ok),
            "failed": len(failed),
            # still running when the window's drain ended: no latency, in no percentile
            "unfinished": len(unfinished),
            "excluded": dict(
                Counter(r.excluded for r in records if r.target == name and r.excluded)
            ),
            "errors": dict(Counter(r.error for r in failed)),
            # fewer than two content events: a one-token answer, or all of it in one event
            "tpot_not_measured": sum(1 for r in ok if r.tpot_s is None),
        },
        "throughput": {
            "requests_per_s": per_s(len(ok)),
            "output_tokens_per_s": per_s(output_tokens),
            "active_s": active,
        },
        "goodput": {
            "requests_per_s": per_s(good),
            "fraction": good / len(measured) if measured else None,
            "slo": dict(settings.slo),
        },
        "client": {"send_lag_s": send_lag, "loop_lag_s": loop, "cpu": cpu},
        "valid": not reasons,
        "invalid_reasons": reasons,
        "compat": compat(ok),
        "gpu": gpus(g for g in data.gpu if _within(g.at, intervals)),
        "mbu": _mbu(ok, active, metrics, settings),
        "server": server_metrics.server_block([w for w in data.server if w.target == name]),
        "stream": asdict(stream_shape((r.itl_s, r.tpot_s, r.output_tokens) for r in ok)),
        "signals": signals(ok),
        "sessions": sessions.view(measured),
    }
    summary.update(_checked(name, records, ok, summary, settings, data.gpu, intervals))
    if settings.slice_s:
        mine = [p for p in phases if p.target == name]
        summary["slices"] = slices.slices(measured, mine, settings.slice_s, settings.slos)
    return summary


def _invalid(
    phases: Sequence[Phase],
    any_ok: bool,
    send_lag: dict[str, Any],
    loop: dict[str, Any],
    cpu: float | None,
    settings: SummarySettings,
) -> list[str]:
    """Why a target's figures at this level cannot be trusted; none when they can."""
    reasons = []
    cut = [p for p in phases if p.interrupted]
    if cut:
        when = time.strftime("%H:%M:%S UTC", time.gmtime(cut[0].done_at or cut[0].end_at))
        reasons.append(
            f"interrupted at {when} in block {cut[0].target}#{cut[0].block}: fewer blocks than "
            "planned, and requests in flight then were cancelled and are not counted"
        )
    if not any_ok:
        reasons.append("no successful requests")
    late = _starved(cpu)
    if send_lag["p99"] is not None and send_lag["p99"] > settings.max_send_lag_s:
        reasons.append(
            f"client send lag P99 {send_lag['p99'] * 1e3:.1f} ms > "
            f"{settings.max_send_lag_s * 1e3:.0f} ms: " + (late or "the client was the bottleneck")
        )
    if loop["p99"] is not None and loop["p99"] > settings.max_loop_lag_s:
        reasons.append(
            f"client event-loop lag P99 {loop['p99'] * 1e3:.1f} ms > "
            f"{settings.max_loop_lag_s * 1e3:.0f} ms: timings are blurred"
            + (f" ({late})" if late else " by the client")
        )
    return reasons


def _checked(
    name: str,
    records: Sequence[Record],
    ok: Sequence[Record],
    summary: dict[str, Any],
    settings: SummarySettings,
    gpu: Sequence[GpuSample],
    intervals: Sequence[tuple[float, float]],
) -> dict[str, Any]:
    """quality, consistency, cost and energy: each present only when its inputs were.

    Quality counts every answered item, warm-up included (an answer's correctness does not
    depend on the window); consistency only answers from the measured window, under load."""
    answered = [r for r in records if r.target == name and r.ok and r.eval_id is not None]
    blocks = {
        "quality": quality.summarize(
            [
                (r.eval_id, r.correct)
                for r in answered
                if r.eval_id is not None and r.correct is not None
            ],
            timed_out=sum(1 for r in answered if r.eval_timed_out),
        ),
        "consistency": consistency.summarize(
            (r.consistency_id, r.first_difference) for r in ok if r.consistency_id is not None
        ),
    }
    throughput, active = summary["throughput"], summary["throughput"]["active_s"]
    if settings.gpu_hour_price is not None and active > 0:
        e2e = sum(r.e2e_s for r in ok if r.e2e_s is not None and r.ttft_s is not None)
        ttft = sum(r.ttft_s for r in ok if r.e2e_s is not None and r.ttft_s is not None)
        blocks["cost"] = cost.cost(
            settings.gpu_hour_price,
            settings.gpus,
            sum(r.input_tokens or 0 for r in ok) / active,
            throughput["output_tokens_per_s"],
            ttft / e2e if e2e > 0 else None,
        )
    blocks["energy"] = cost.energy(
        [s for s in gpu if _within(s.at, intervals)],
        union_seconds(intervals),
        sum(r.output_tokens or 0 for r in ok),
        summary["goodput"]["requests_per_s"],
    )
    return {key: block for key, block in blocks.items() if block is not None}


def _mbu(
    ok: Sequence[Record], active: float, metrics: dict[str, Any], settings: SummarySettings
) -> float | None:
    tpot = metrics["tpot_s"]["mean"]
    if not (settings.weight_bytes and settings.gpu_bandwidth_bytes_s and tpot and active):
        return None
    context = np.mean([(r.input_tokens or 0) + (r.output_tokens or 0) / 2 for r in ok])
    streams = sum(r.e2e_s or 0.0 for r in ok) / active  # Little's law
    return stats.mbu(
        tpot,
        settings.weight_bytes,
        settings.kv_bytes_per_token,
        float(context),
        streams,
        settings.gpu_bandwidth_bytes_s,
        settings.gpus,
    )


def _level(data: RunData) -> dict[str, Any]:
    names = list(dict.fromkeys([p.target for p in data.phases] + [r.target for r in data.records]))
    return {name: _target(name, data) for name in names}


def _judge_steady(
    targets: dict[str, Any],
    records: Sequence[Record],
    phases: Sequence[Phase],
    open_loop: bool,
    replay: bool,
) -> None:
    """Each target's steady_state at this level (steady.py); a saturated open-loop level's
    throughput is what completed in its window, not what arrived in it."""
    for name, t in targets.items():
        state = t["steady_state"] = steady.judge(
            [r for r in records if r.target == name],
            [p for p in phases if p.target == name],
            t["throughput"]["active_s"],
            open_loop,
            server=t["server"]["gauges"] if t["server"] else None,
            replay=replay,
        )
        if open_loop and not state["steady"] and state["completion_per_s"] is not None:
            t["throughput"]["requests_per_s"] = state["completion_per_s"]
            t["throughput"]["output_tokens_per_s"] = state["completion_output_tokens_per_s"]


def _judge_queueing(points: list[dict[str, Any]]) -> None:
    """Closed-loop sweep points beyond what each target's server runs at once: not steady."""
    names = dict.fromkeys(n for p in points for n in p["targets"])
    for name in names:
        levels = [(p["level"], p["targets"][name]) for p in points if name in p["targets"]]
        rates = [t["throughput"]["requests_per_s"] for _, t in levels]
        ttfts = [t["metrics"]["ttft_s"]["p50"] for _, t in levels]
        found = steady.queueing(list(zip([c for c, _ in levels], rates, ttfts, strict=True)))
        for level, t in levels:
            if level in found:
                t["steady_state"]["reasons"].append(found[level])
                t["steady_state"]["steady"] = False


def summarize(
    records: Sequence[Record],
    phases: Sequence[Phase],
    loop_lag: Sequence[tuple[float, float]],
    gpu: Sequence[GpuSample],
    settings: SummarySettings,
    sweep: str | None = None,
    *,
    server: Sequence[ServerWindow] = (),
) -> dict[str, Any]:
    """The whole summary.json; a function of its inputs alone (summarize_run's)."""
    data = RunData(
        records=list(records),
        phases=list(phases),
        loop_lag=list(loop_lag),
        gpu=list(gpu),
        server=list(server),
        settings=settings,
        meta={"sweep": sweep},
    )
    return summarize_run(data)


def summarize_run(data: RunData) -> dict[str, Any]:
    """The whole summary.json of everything a run directory holds.

    A sweep (several load levels) gets one point per level under `sweep.points`, and the
    top-level `targets` describe its highest level. A run on the simulator's twin also says
    what its prediction rests on (`virtual`: the preset, its fit or none).
    """
    summary = _levels(data)
    if "virtual_run" in data.meta:
        summary["virtual"] = data.meta["virtual_run"]
    return summary


def _levels(data: RunData) -> dict[str, Any]:
    phases, sweep = data.phases, data.meta.get("sweep")
    levels = sorted({p.level for p in phases if p.level is not None})
    interrupted = any(p.interrupted for p in phases)
    open_loop = sweep in ("rate", "replay")  # a trace's arrivals do not wait for answers
    if len(levels) <= 1:
        targets = _level(data)
        _judge_steady(targets, data.records, phases, open_loop, sweep == "replay")
        return {"version": 1, "interrupted": interrupted, "targets": targets}
    points: list[dict[str, Any]] = []
    for level in levels:
        at_level = replace(
            data,
            records=[r for r in data.records if r.level == level],
            phases=[p for p in phases if p.level == level],
            server=[w for w in data.server if w.level == level],
        )
        targets = _level(at_level)
        _judge_steady(targets, at_level.records, at_level.phases, open_loop, sweep == "replay")
        points.append({"level": level, "targets": targets})
    if not open_loop:
        _judge_queueing(points)
    knees = {}
    for name in dict.fromkeys(n for p in points for n in p["targets"]):
        found = steady.knee(
            [(p["level"], p["targets"][name]["steady_state"]["steady"]) for p in points
             if name in p["targets"]]
        )  # fmt: skip
        if found is not None:
            knees[name] = found
    return {
        "version": 1,
        "interrupted": interrupted,
        "targets": points[-1]["targets"],
        "sweep": {"kind": sweep, "points": points, "knee": knees},
    }
