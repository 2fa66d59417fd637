"""`python -m loadgen plan`: the cheapest deployment that meets the SLOs for this traffic.

Everything that can be refused is refused before any search (one line, exit 2): the space
(plan/space.py), the twin, the traffic's window, a model that fits on no candidate. Then each
candidate is checked without running it (plan/bounds.py): does it fit in memory, can its
decode step ever meet the TPOT limit. Those left are sized (replicas.py) in order of the
roofline's lower bound on their cost, on `--jobs` processes or a Ray cluster (pools.py); a
candidate whose lower bound is above the top of the cheapest found's cost range is not run:
it cannot win. Every candidate is listed in plan.json with what became of it, and why.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen import replay
from loadgen.commands import capacity, pools
from loadgen.commands.replicas import CapacityRequest, Job
from loadgen.engine import virtual
from loadgen.plan import advice, basis, bounds, space
from loadgen.reports import plan as plan_report
from loadgen.runs.config import RunConfig
from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset


@dataclass(frozen=True, slots=True)
class PlanSettings:
    candidates: str | None
    asked: space.Asked  # the shorthand flags
    twin: str | None
    headroom: float
    jobs: int | None  # candidates sized at once (None: the cores, or the Ray cluster's CPUs)
    ray: str | None  # the Ray cluster's address (pools.py), None: this machine's processes
    rate: float | None  # the traffic's requests/s without a replay
    argv: tuple[str, ...]  # the flags after `plan`
    request: CapacityRequest  # how the command line reads a capacity search's argv


def _list(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def settings(
    args: argparse.Namespace, argv: Sequence[str], rate: float | None, request: CapacityRequest
) -> PlanSettings:
    return PlanSettings(
        candidates=args.candidates,
        asked=space.Asked(
            models=_list(args.models),
            gpu_types=_list(args.gpu_types),
            dtypes=_list(args.dtypes),
            tensor_parallel=tuple(args.tensor_parallel or ()),
            prices=args.gpu_prices or "",
            max_replicas=args.max_replicas,
        ),
        twin=args.twin,
        headroom=args.headroom,
        jobs=args.jobs,
        ray=args.ray,
        rate=rate,
        argv=tuple(argv),
        request=request,
    )


def main(config: RunConfig, plan: PlanSettings) -> int:
    """Plan, write, print the table and the sentence; 0, or 2 for bad input."""
    began = time.monotonic()
    opened = contextlib.ExitStack()
    try:
        entries, traffic, bound, written = prepare(config, plan)
        pool = opened.enter_context(_pool(plan))
    except ValueError as exc:
        print(f"loadgen plan: {exc}", file=sys.stderr)
        return 2
    for path, preset in written.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(presets.dump(preset))
    with opened:
        sized = search(config, pool, entries, traffic, bound, plan)
    result = plan_report.result(config, plan.headroom, traffic, sized, time.monotonic() - began)
    result["ranking"] = advice.rank(result["candidates"])
    result["front"] = advice.front(result["candidates"])
    result["sentence"] = advice.sentence(result)
    plan_report.write(config.out, result)
    print(plan_report.console(result))
    print(f"results: {config.out}/ (plan.json, plan.md, plan.html, candidates/*/)")
    return 0


def _traffic(config: RunConfig, rate: float | None) -> bounds.Traffic:
    """What the traffic asks at 1x: the replay window's, or --rate of the workload flags."""
    if config.replay is None:
        assert rate is not None, "the traffic is a replay or a rate"
        mean_in = (config.input_tokens.low + config.input_tokens.high) / 2
        mean_out = (config.output_tokens.low + config.output_tokens.high) / 2
        return bounds.Traffic(rate, rate * mean_out, mean_in, mean_out)
    capacity.window_requests(config, 1.0)  # refuses a window too small to judge the SLOs
    window = replay.load(config.replay, config.duration_s, config.requests).arrivals
    span = window[-1].offset_s
    if span <= 0:
        raise ValueError(f"--replay {config.replay.file}: the window's requests all arrive at once")
    out = sum(a.record.output_tokens for a in window)
    return bounds.Traffic(
        len(window) / span,
        out / span,
        sum(a.record.input_tokens for a in window) / len(window),
        out / len(window),
    )


def _twinned(
    candidates: Sequence[space.Candidate],
    twin_file: str | None,
    out: Path,
    prices: dict[str, float],
) -> list[tuple[space.Candidate, str]]:
    """The candidates with --twin applied: on its GPU and model, the twin itself (with the
    candidate's flags); of its model on another GPU, its efficiencies carried over (a
    preset file under DIR/presets/, written before the searches). Each with the GPU a fit
    was carried from."""
    if twin_file is None:
        return [(c, "") for c in candidates]
    if not Path(twin_file).is_file():
        raise ValueError(f"--twin {twin_file}: no such file")
    try:
        twin = presets.load_file(twin_file)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"--twin {twin_file}: {exc}") from None
    if not twin.fit:
        raise ValueError(f"--twin {twin_file}: not a fitted preset (it has no [fit] table)")
    gpu = space.gpu_of(twin)
    out_list: list[tuple[space.Candidate, str]] = []
    on_twin = False
    for c in candidates:
        if c.base is None or _shape(c.base) != _shape(twin):
            out_list.append((c, ""))
        elif c.gpu == gpu and c.tensor_parallel == twin.perf.hardware.tensor_parallel:
            on_twin = True
            spec = f"virtual:{twin_file}"
            own = replace(c, spec=spec, args=c.engine_args, base=twin, built=False, model_args="")
            out_list.append((own, ""))
        else:
            perf = replace(c.base.perf, efficiency=twin.perf.efficiency)
            name = f"{c.base.name}-{twin.name}"
            carried = replace(c.base, name=name, perf=perf, fit=twin.fit, uncalibrated="")
            built = replace(c, spec="", args=c.engine_args, base=carried, built=True, model_args="")
            out_list.append((built, gpu))
    if not on_twin:
        if gpu not in prices:
            raise ValueError(f"--twin {twin_file}: no price for its GPU {gpu}")
        tp = twin.perf.hardware.tensor_parallel
        dtype = space.dtype_of(twin)
        twin_candidate = space.Candidate(
            twin.name, f"virtual:{twin_file}", "", twin, gpu, prices[gpu], dtype, tp
        )
        out_list.append((twin_candidate, ""))
    return out_list


def _shape(preset: Preset) -> tuple[float, int, float]:
    m = preset.perf.model
    return (m.params, m.layers, m.bytes_per_param)


def prepare(
    config: RunConfig, plan: PlanSettings
) -> tuple[list[dict[str, Any]], bounds.Traffic, int, dict[str, Preset]]:
    """Every candidate's entry, checked without running it, the traffic and the bound on
    replicas; ValueError for bad input."""
    found = space.read(plan.candidates, plan.asked)
    traffic = _traffic(config, plan.rate)
    candidates = _twinned(found.candidates, plan.twin, config.out, found.prices)
    want = 1 + plan.headroom
    tpot = config.summary.slos.limits.get("tpot")
    entries = []
    written: dict[str, Preset] = {}  # preset files the searches will read
    for c, carried_from in candidates:
        if c.built and c.base is not None:  # a preset file to write before the searches
            c = replace(c, spec=f"virtual:{config.out / 'presets' / _slug(c.base.name)}.toml")
        applied, why = bounds.fit(c.base, c.args) if c.base is not None else (None, c.refused)
        entry: dict[str, Any] = {
            "name": c.name,
            "spec": c.spec,
            "args": c.args,
            "gpu": c.gpu,
            "gpus": c.tensor_parallel,
            "dtype": c.dtype,
            "usd_per_gpu_hour": c.usd_per_gpu_hour,
            "bundled": virtual.bundled(c.spec),
            "carried_from": carried_from,
            "status": "searched",
            "reason": None,
        }
        entries.append(entry)
        if applied is None:
            entry.update(status="does_not_fit", reason=why)
            continue
        if c.built and c.base is not None:
            written[entry["spec"].removeprefix("virtual:")] = c.base
        gpus = entry["gpus"] = applied.perf.hardware.tensor_parallel
        floor = bounds.replicas_floor(applied, traffic, want)
        entry.update(
            gpus=gpus,
            memory=bounds.memory_need(applied),
            basis=basis.of(applied, entry["bundled"], None, carried_from),
            bounds={
                "tpot_floor_s": bounds.tpot_floor(applied),
                "output_tokens_per_s_ceiling": bounds.ceiling(applied),
                "replicas_floor": floor,
                "usd_per_hour_floor": floor * gpus * c.usd_per_gpu_hour,
            },
        )
        if tpot is not None and bounds.tpot_floor(applied) > tpot:
            entry.update(
                status="cannot_meet",
                reason=f"meets TPOT ≤ {tpot * 1e3:g} ms at no size: no request's TPOT is under "
                f"{bounds.tpot_floor(applied) * 1e3:.1f} ms ({entry['memory']}, streamed once "
                "a step)",
            )
    if not any(e["status"] != "does_not_fit" for e in entries):
        raise ValueError(f"no candidate can serve the model: {entries[0]['reason']}")
    return entries, traffic, found.max_replicas, written


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)


def _job(config: RunConfig, plan: PlanSettings, entry: dict[str, Any], bound: int) -> Job:
    slug = _slug(entry["name"])
    return Job(
        name=entry["name"],
        spec=entry["spec"],
        args=entry["args"],
        argv=plan.argv,
        out=config.out / "candidates" / slug,
        rate=plan.rate,
        headroom=plan.headroom,
        max_replicas=bound,
        request=plan.request,
    )


def _pool(plan: PlanSettings) -> contextlib.AbstractContextManager[pools.Pool]:
    if plan.ray is not None:
        return pools.ray_cluster(plan.ray, plan.jobs)
    return pools.processes(plan.jobs or os.cpu_count() or 1)


def search(
    config: RunConfig,
    pool: pools.Pool,
    entries: list[dict[str, Any]],
    traffic: bounds.Traffic,
    bound: int,
    plan: PlanSettings,
) -> list[dict[str, Any]]:
    """Size the candidates left on the pool, cheapest lower bound first; skip those whose
    lower bound is above the top of the cheapest found's cost range."""
    due = sorted(
        (e for e in entries if e["status"] == "searched"),
        key=lambda e: e["bounds"]["usd_per_hour_floor"],
    )
    total = len(due)
    print(
        f"plan: {len(entries)} candidates: {total} to size on {pool.where}, "
        f"{len(entries) - total} ruled out without a run",
        file=sys.stderr,
        flush=True,
    )
    best: float | None = None  # the top of the cheapest cost range found so far
    done = 0
    running: dict[concurrent.futures.Future[dict[str, Any]], dict[str, Any]] = {}
    while due or running:
        while due and len(running) < pool.slots:
            entry = due.pop(0)
            floor = entry["bounds"]["usd_per_hour_floor"]
            if best is not None and floor > best:
                entry.update(
                    status="pruned",
                    reason=f"the roofline puts it at ${floor:,.2f}/h or more, "
                    f"above the cheapest found (${best:,.2f}/h at the top of its range)",
                )
                done += 1
                _progress(done, total, entry)
                continue
            running[pool.submit(_job(config, plan, entry, bound))] = entry
        if not running:
            break
        finished, _ = concurrent.futures.wait(running, return_when="FIRST_COMPLETED")
        for future in finished:
            entry = running.pop(future)
            _sized(entry, future.result(), traffic, 1 + plan.headroom)
            if entry.get("usd_per_hour_range"):
                top = entry["usd_per_hour_range"][1]
                best = top if best is None else min(best, top)
            done += 1
            _progress(done, total, entry)
    return entries


def _sized(
    entry: dict[str, Any], sized: dict[str, Any], traffic: bounds.Traffic, want: float
) -> None:
    entry.update(sized)
    if sized["replicas"] is None:
        entry["status"] = "cannot_meet" if "no size" in (sized["reason"] or "") else "over_bound"
        return
    chosen = advice.chosen(entry)
    assert chosen is not None, "the chosen count was searched"
    entry["basis"] = basis.of(
        _preset(entry), entry["bundled"], chosen["binding_slo"], entry["carried_from"]
    )
    watts = None
    if chosen["requests_per_s"] and chosen["e2e_mean_s"]:
        sequences = chosen["requests_per_s"] / entry["replicas"] * chosen["e2e_mean_s"]
        context = traffic.mean_input_tokens + traffic.mean_output_tokens / 2
        watts = bounds.power(_preset(entry), sequences, context)
    entry["status"] = "ranked"
    advice.priced(entry, want, watts)


def _preset(entry: dict[str, Any]) -> Preset:
    """The preset its searches ran: what `--target SPEC --virtual-args ARGS` builds."""
    return virtual.preset(entry["spec"], entry["args"])


def _progress(done: int, total: int, entry: dict[str, Any]) -> None:
    if entry["status"] == "ranked":
        n = entry["replicas"]
        said = (
            f"{n} replica{'s hold' if n > 1 else ' holds'} {entry['share']:.2f}x, "
            f"${entry['usd_per_hour']:,.2f}/h"
        )
    else:
        said = f"{entry['status'].replace('_', ' ')}: {entry['reason']}"
    print(f"plan: [{done}/{total}] {entry['name']}: {said}", file=sys.stderr, flush=True)
