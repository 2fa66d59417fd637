"""The load on the simulator's twin: the workload becomes the twin's requests, each level one
block of their predicted timings, made records as a real run's are. No sockets, no sleeping.
"""

from __future__ import annotations

import sys
import time
from functools import partial

from loadgen import replay
from loadgen.analysis.records import Phase, Record, RunData
from loadgen.analysis.server_metrics import ServerWindow
from loadgen.drivers.meta import run_meta
from loadgen.engine import virtual, virtual_requests, virtual_settle
from loadgen.inputs.prompt_text import Prompt
from loadgen.runs.config import RunConfig
from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import budget


def refuse(config: RunConfig) -> None:
    """What a run on the virtual clock cannot do, said before anything is computed."""
    refused = {
        "a real target": not all(virtual.is_virtual(spec) for spec in config.targets),
        "--eval/--consistency": config.probes is not None,
        "--workers": config.workers > 1,
        "--embedded": config.embedded,
        "--blocks": (config.blocks or 1) > 1,
    }
    if asked := [name for name, given in refused.items() if given]:
        raise ValueError(f"a virtual: target does not take {', '.join(asked)}")


def drive(
    config: RunConfig, loaded: replay.Replay | None, dataset: list[Prompt] | None = None
) -> RunData:
    """The run on the simulator's virtual clock (engine/virtual.py): each level one block of
    the twin's predicted timings per target, all targets on the same arrivals and lengths,
    checked before anything is computed."""
    refuse(config)
    models = {spec: virtual.preset(spec, config.virtual_args) for spec in config.targets}
    for model in models.values():
        virtual.check_replicas(model, config.virtual_replicas)
    window = virtual.Window(config.warmup_s, config.duration_s, config.requests)
    expected = virtual.expected_requests(config.sweep, config.levels, window, config.turns)
    if expected is not None:
        expected *= len(models)
        available = budget.available_bytes()
        if fault := virtual.cost_fault(expected, config.virtual_budget_s, available):
            raise ValueError(fault)
        seconds = expected * virtual.SECONDS_PER_REQUEST
        if config.progress and seconds >= virtual.SAY_AFTER_S:  # long enough to wonder
            said = ", ".join(config.targets)
            print(f"{said}: simulating ~{expected:,} requests, ~{seconds:.0f} s", file=sys.stderr)
    data = RunData(settings=config.summary)
    replayed, lines = None, []
    if config.replay is not None:  # the window is the trace's: every arrival of it is sent
        assert loaded is not None, "measure reads the trace"
        trace = loaded
        if config.replay.skip_bad_rows:  # else the twin refuses them 400, as vLLM does
            for model in models.values():
                trace = replay.fit(trace, model.max_model_len, config.replay)
        window = virtual.Window(config.warmup_s, None, None)
        data.meta["replay"] = trace.meta
        sizing = virtual_requests.sizing(config.endpoint)
        book = replay.PromptBook(sizing, 0, config.replay.block_tokens)
        gap_scale = config.replay.gap_scale
        replayed = virtual_requests.replayed(trace.arrivals, book, config.endpoint, gap_scale)
        lines = [a.record.line for a in trace.arrivals]
    served: dict[str, list[list[int]]] = {spec: [] for spec in models}
    interval = virtual.stream_interval(config.virtual_args)
    start = time.time()
    for level in config.levels:
        done = start
        for spec, model in models.items():  # each target the same arrivals, from one start
            records, phase, gauges, counts = _predict_level(
                config, model, level, window, replayed, lines, interval, start, dataset
            )
            data.records += records
            data.phases.append(phase)
            data.server.append(gauges)
            served[spec].append(counts)
            done = max(done, phase.done_at or phase.end_at)
        start = done + 1.0  # levels one after another, as run
    names = {spec: f"virtual:{model.name}" for spec, model in models.items()}
    targets = {names[s]: {"url": s, "model": m.served_model_name} for s, m in models.items()}
    data.meta |= run_meta(config, targets, None)
    data.meta["prompts"] = {"shared_prefix_tokens": config.shared_prefix_tokens}
    twins = {
        names[spec]: {
            "preset": model.name,
            "args": config.virtual_args,
            "what_if": virtual.what_if(spec, config.virtual_args),  # those changing the preset
            "replicas": config.virtual_replicas,
            "requests_per_replica": served[spec],
            "bundled": virtual.bundled(spec),
            "fit": model.fit,  # a fitted preset's held-out errors
            "uncalibrated": model.uncalibrated or None,  # why no measurement backs it
        }
        for spec, model in models.items()
    }
    first = next(iter(twins.values()))
    several = {"by_target": twins} if len(twins) > 1 else {}
    data.meta |= {"virtual": True, "virtual_run": first | several}
    return data


def _predict_level(
    config: RunConfig,
    model: Preset,
    level: float,
    window: virtual.Window,
    replayed: virtual_requests.Planned | None,
    lines: list[int],
    interval: int,
    start: float,
    dataset: list[Prompt] | None,
) -> tuple[list[Record], Phase, ServerWindow, list[int]]:
    """One target's block at one level on the virtual clock: its requests drawn from the
    run's seed (the same for every target), then predicted, with its engines' gauges."""
    prompts = virtual_requests.Prompts(
        config.endpoint,
        config.input_tokens,
        config.output_tokens,
        dataset,
        config.shared_prefix_tokens,
        config.turns,
        config.think_time,
    )
    plan = partial(
        virtual.plan,
        model,
        level=level,
        sweep=config.sweep,
        prompts=prompts,
        arrival=config.arrival,
        gamma_shape=config.gamma_shape,
        seed=config.summary.seed,
        replicas=config.virtual_replicas,
    )
    planned, at, settling = replayed, window, None
    if planned is None and config.settle is not None:  # a capacity probe: it settles
        planned, at, settling = virtual_settle.plan(
            plan, model, config.settle, window, config.summary.seed, config.virtual_replicas
        )
    if planned is None:
        planned = plan(window)
    records, phase, gauges, counts = virtual.run_block(
        model,
        f"virtual:{model.name}",
        planned,
        window=at,
        level=level,
        seed=config.summary.seed,
        replicas=config.virtual_replicas,
        start=start,
        drain=config.drain_s,
        lines=lines,
        stream_interval=interval,
        stall_s=config.stall_threshold_s,
    )
    if settling is not None:
        phase = virtual_settle.marked(phase, settling)
    return records, phase, gauges, counts
