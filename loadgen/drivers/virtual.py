"""The load on the simulator's twin: the workload becomes the twin's requests, each level one
block of their predicted timings, made records as a real run's are. No sockets, no sleeping.
"""

from __future__ import annotations

import time
from functools import partial

from loadgen import replay
from loadgen.analysis.records import RunData
from loadgen.config import RunConfig
from loadgen.drivers.meta import run_meta
from loadgen.engine import virtual, virtual_requests, virtual_settle
from loadgen.engine.workload import Prompt


def refuse(config: RunConfig) -> None:
    """What a run on the virtual clock cannot do, said before anything is computed."""
    refused = {
        "another target": len(config.targets) > 1,
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
    the twin's predicted timings, checked before anything is computed."""
    refuse(config)
    spec = config.targets[0]
    model = virtual.preset(spec, config.virtual_args)
    name = f"virtual:{model.name}"
    window = virtual.Window(config.warmup_s, config.duration_s, config.requests)
    data = RunData(settings=config.summary)
    prompts = virtual_requests.Prompts(
        config.endpoint,
        config.input_tokens,
        config.output_tokens,
        dataset,
        config.shared_prefix_tokens,
        config.turns,
        config.think_time,
    )
    replayed, lines = None, []
    if config.replay is not None:  # the window is the trace's: every arrival of it is sent
        assert loaded is not None, "measure reads the trace"
        trace = replay.fit(loaded, model.max_model_len, config.replay)
        window = virtual.Window(config.warmup_s, None, None)
        data.meta["replay"] = trace.meta
        sizing = virtual_requests.sizing(config.endpoint)
        book = replay.PromptBook(sizing, 0, config.replay.block_tokens)
        replayed = virtual_requests.replayed(trace.arrivals, book, config.endpoint)
        lines = [a.record.line for a in trace.arrivals]
    served = []
    interval = virtual.stream_interval(config.virtual_args)
    start = time.time()
    for level in config.levels:
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
        records, phase, counts = virtual.run_block(
            model,
            name,
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
        data.records += records
        data.phases.append(phase)
        served.append(counts)
        start = (phase.done_at or phase.end_at) + 1.0  # levels one after another, as run
    data.meta |= run_meta(config, {name: {"url": spec, "model": model.served_model_name}}, None)
    data.meta["prompts"] = {"shared_prefix_tokens": config.shared_prefix_tokens}
    data.meta |= {
        "virtual": True,
        "virtual_run": {
            "preset": model.name,
            "args": config.virtual_args,
            "replicas": config.virtual_replicas,
            "requests_per_replica": served,
            "bundled": virtual.bundled(spec),
            "fit": model.fit,  # a fitted preset's held-out errors
            "uncalibrated": model.uncalibrated or None,  # why no measurement backs it
        },
    }
    return data
