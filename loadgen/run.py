"""A load run from its RunConfig: targets resolved, prompts calibrated, levels driven, results.

`main` is what `python -m loadgen` does once its flags are a RunConfig (a worker process
does the same with its share): `run` starts the embedded stack when asked for, `measure`
makes one run directory at config.out, in this process or over --workers processes. A
caller that runs several runs against one stack (say, probes of a search) starts it once,
takes `on_stack`, and calls `measure` with a `dataclasses.replace` per run.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import platform
import secrets
import sys
import time
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import uvloop

from loadgen import replay, rundir
from loadgen.analysis import evals
from loadgen.analysis.records import Record, RunData
from loadgen.analysis.summary import summarize_run
from loadgen.config import RunConfig
from loadgen.engine import client, virtual, virtual_requests, virtual_settle
from loadgen.engine.dataset import load_dataset
from loadgen.engine.interrupt import default_signal_handlers, stop_on_signal
from loadgen.engine.probes import Probes
from loadgen.engine.progress import Progress
from loadgen.engine.runner import Load, Runner
from loadgen.engine.schedule import Block, plan, shard_count
from loadgen.engine.sizing import calibrate
from loadgen.engine.targets import Target, load_file, resolve
from loadgen.engine.workload import Prompt, Sizing, Workload, shared_prefix, user_messages
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.shards import supervisor, sync
from loadgen.stack import embedded, gpu_metrics


def main(config: RunConfig) -> int:
    """Run, print the console table; the exit code (0, 2 for bad input, 130 interrupted)."""
    try:
        summary = run(config)
    except KeyboardInterrupt:
        print("\nloadgen: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    print(report.console_table(summary))
    print(f"results: {config.out}/ (summary.json, requests.jsonl, report.md, report.html)")
    if summary["interrupted"]:
        print("loadgen: interrupted: partial results, marked invalid", file=sys.stderr)
        return 130
    return 0


def run(config: RunConfig) -> dict[str, Any]:
    """The whole run, the embedded stack started first (and stopped last) when asked for."""
    if not config.embedded:
        return measure(config)
    with embedded.stack(config.out / "embedded") as stack:
        return measure(on_stack(config, stack))


def on_stack(config: RunConfig, stack: embedded.Stack) -> RunConfig:
    """The run aimed at a started stack: proxy and direct name it, its gauges and both servers'
    metrics are sampled, and --target proxy measures direct as well."""
    specs = list(config.targets)
    if "proxy" in specs and "direct" not in specs:
        # direct first: the baseline of the report's comparison shows what the proxy costs
        specs.insert(specs.index("proxy"), "direct")
    return replace(
        config,
        embedded=False,
        targets=tuple(specs),
        overrides={"proxy": stack.proxy, "direct": stack.direct},
        gpu_metrics=config.gpu_metrics or (stack.metrics,),
        server_metrics=config.server_metrics or (stack.metrics, stack.proxy_metrics),
    )


def measure(config: RunConfig) -> dict[str, Any]:
    """One run directory at config.out (data, summary, report); returns the summary."""
    if config.prompt_seed is None:  # fresh prompts for every run; its workers share them
        config = replace(config, prompt_seed=secrets.randbits(63))
    # a bad trace stops the run before any load; the window read is the one the run replays
    trace = None
    if config.replay is not None:
        trace = replay.load(config.replay, config.duration_s, config.requests)
    dataset = load_dataset(config.dataset) if config.dataset else None  # so does a bad dataset
    if any(virtual.is_virtual(spec) for spec in config.targets):
        data = predicted(config, trace, dataset)
        summary = summarize_run(data)
        summary["virtual"] = data.meta["virtual_run"]
        rundir.write(config.out, data, summary)
        report.write(config.out, data, summary)
        return summary
    if config.workers > 1:
        return supervisor.run_workers(config)
    file_targets = load_file(config.targets_file) if config.targets_file else None
    targets = {}
    for spec in config.targets:
        target = resolve(spec, file_targets, overrides=config.overrides)
        targets[target.name] = target
    data = uvloop.run(execute(config, targets, dataset, trace))
    if not data.phases:
        raise KeyboardInterrupt  # stopped before any load was sent: nothing to write
    summary = summarize_run(data)
    rundir.write(config.out, data, summary)
    report.write(config.out, data, summary, comparison.of_run(data, summary))
    return summary


def predicted(
    config: RunConfig, loaded: replay.Replay | None, dataset: list[Prompt] | None = None
) -> RunData:
    """The run on the simulator's virtual clock (engine/virtual.py): each level one block of
    the twin's predicted timings, checked before anything is computed."""
    refused = {
        "another target": len(config.targets) > 1,
        "--eval/--consistency": config.probes is not None,
        "--workers": config.workers > 1,
        "--embedded": config.embedded,
        "--blocks": (config.blocks or 1) > 1,
    }
    if asked := [name for name, given in refused.items() if given]:
        raise ValueError(f"a virtual: target does not take {', '.join(asked)}")
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
        records, phase, gauges, counts = virtual.run_block(
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
        data.server.append(gauges)
        served.append(counts)
        start = (phase.done_at or phase.end_at) + 1.0  # levels one after another, as run
    data.meta |= _meta(config, {name: {"url": spec, "model": model.served_model_name}}, None)
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


async def execute(
    config: RunConfig,
    targets: dict[str, Target],
    dataset: list[Prompt] | None,
    loaded: replay.Replay | None,
) -> RunData:
    """One process's share of the load, all levels; returns the raw data."""
    shard, shards = config.shard
    models = await _models(config, targets)
    first = next(iter(targets))
    rng = np.random.default_rng([config.summary.seed, shard])
    sizing = (
        Sizing() if config.dataset else await _prompt_sizing(config, targets[first], models[first])
    )
    prompt_seed = config.prompt_seed
    assert prompt_seed is not None, "measure draws it"
    workload = Workload(
        endpoint=config.endpoint,
        input_tokens=config.input_tokens,
        output_tokens=config.output_tokens,
        rng=rng,
        dataset=dataset,
        sizing=sizing,
        temperature=config.temperature,
        ignore_eos=config.ignore_eos,
        prompt_rng=np.random.default_rng([prompt_seed, shard]),
        shared=shared_prefix(
            config.shared_prefix_tokens, sizing, np.random.default_rng(prompt_seed)
        ),
        turns=config.turns,
        think=config.think_time,
    )
    progress = Progress(label=f"shard {shard}/{shards}" if shards > 1 else "")
    runner = Runner(targets, models, workload, rng, config.timeout_s, shard, progress)
    runner.stall_threshold_s = config.stall_threshold_s
    runner.drain_s = config.drain_s
    trace = await _replayed(config, loaded, runner, sizing, prompt_seed) if loaded else None
    if config.probes is not None:
        runner.probes = await _probes(config, runner)
    if shard == 0:  # one sampler per run, not per shard: shards share the servers
        runner.server_metrics = config.server_metrics
    served = {n: {"url": t.url, "model": models[n]} for n, t in targets.items()}
    sizing_meta = None if workload.dataset else workload.sizing.meta()
    data = RunData(settings=config.summary, meta=_meta(config, served, sizing_meta))
    data.meta["prompts"] = {
        "seed": prompt_seed,
        "shared_prefix_tokens": config.shared_prefix_tokens,
    }
    if trace is not None:
        data.meta["replay"] = trace.meta
    helpers = []
    if config.progress:
        helpers.append(asyncio.create_task(progress.draw()))
    if config.gpu_metrics and shard == 0:  # one sampler per run, not per shard
        urls = list(config.gpu_metrics)
        helpers.append(
            asyncio.create_task(
                gpu_metrics.sample(urls, config.gpu_interval_s, runner.clock, data.gpu)
            )
        )
    blocks_per_target = config.blocks or (2 if len(targets) > 1 else 1)
    if config.sync_dir:
        at = await sync.start_together(config.sync_dir, shard, shards, config.sync_timeout_s)
        data.meta["synced_start_at"] = at
    stop_on_signal(runner, data.meta)
    try:
        if trace is not None:
            await _replay_blocks(runner, trace, list(targets), blocks_per_target, config)
        for level in config.levels if trace is None else ():
            if runner.stopped:
                runner.cut_short()
                break
            if config.sweep == "concurrency":
                load = Load(concurrency=shard_count(int(level), shard, shards))
            else:
                load = Load(
                    rate=level / shards, arrival=config.arrival, gamma_shape=config.gamma_shape
                )
            requests = shard_count(config.requests, shard, shards) if config.requests else None
            blocks = plan(
                list(targets),
                blocks_per_target,
                config.warmup_s,
                config.duration_s,
                requests,
                config.settle,
            )
            await runner.run(blocks, load, sweep_level=level)
    finally:
        default_signal_handlers()
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    data.records = runner.result.records
    data.phases = runner.result.phases
    data.loop_lag = runner.result.loop_lag
    data.server = runner.result.server
    return data


async def _replayed(
    config: RunConfig, trace: replay.Replay, runner: Runner, sizing: Sizing, prompt_seed: int
) -> replay.Replay:
    """The trace's window, checked against each target's context length, and the runner set
    to give its records their prompts and models."""
    assert config.replay is not None
    async with client.session() as http:
        for name, target in runner.targets.items():
            limit = await client.context_length(http, target, runner.models[name])
            if limit is not None:
                trace = replay.fit(trace, limit, config.replay)
    runner.book = replay.PromptBook(sizing, prompt_seed, config.replay.block_tokens)
    runner.record_models = config.model is None
    return trace


async def _probes(config: RunConfig, runner: Runner) -> Probes:
    """The checked requests of --eval and --consistency; the consistency prompts' reference
    answers taken first, one request at a time, before any load."""
    settings = config.probes
    assert settings is not None
    seed = config.summary.seed
    items = evals.load(settings.eval, seed) if settings.eval else []
    assert config.prompt_seed is not None, "measure draws it"
    fixed = replace(  # its own generators: the ordinary load draws as it would without it
        runner.workload,
        rng=np.random.default_rng([seed, 1]),
        prompt_rng=np.random.default_rng([config.prompt_seed, 1]),
        temperature=0.0,
        ignore_eos=True,
    )
    prompts = [(fixed.path, fixed.body("")) for _ in range(settings.consistency)]
    probes = Probes(
        items,
        settings.eval_fraction,
        prompts,
        config.endpoint,
        content_capture=settings.content_capture,
    )
    if prompts:
        async with client.session() as http:

            async def alone(name: str, path: str, body: dict[str, Any]) -> tuple[Record, str]:
                text: list[str] = []
                start = time.perf_counter()
                target = runner.targets[name]
                record = await client.send(
                    http, target, path, body, start, runner.clock, config.timeout_s, text
                )
                return record, text[0]

            await probes.take_references(runner.models, alone)
    return probes


async def _replay_blocks(
    runner: Runner, trace: replay.Replay, names: list[str], blocks: int, config: RunConfig
) -> None:
    """The window in `blocks` consecutive parts; each part replayed for every target in turn
    (A0 B0 A1 B1 …), this shard's share of it at the offsets a single client would use."""
    shard, shards = config.shard
    speed = config.levels[0]
    for index, part in enumerate(replay.split(trace.arrivals, blocks)):
        mine = replay.share(part, shard, shards)
        if runner.stopped:
            runner.cut_short()
            break
        if not mine:
            continue
        measured = sum(a.offset_s >= config.warmup_s for a in mine)
        plan_ = [Block(name, index, config.warmup_s, None, measured) for name in names]
        await runner.run(plan_, Load(replay=mine), sweep_level=speed)


async def _models(config: RunConfig, targets: dict[str, Target]) -> dict[str, str]:
    models = {}
    async with client.session() as http:
        for name, target in targets.items():
            model = config.model or target.model or await client.first_model(http, target)
            if model is None:
                raise SystemExit(
                    f"loadgen: {name} ({target.url}): no --model given, and its /v1/models "
                    "did not name one (is it running?)"
                )
            models[name] = model
    return models


async def _prompt_sizing(config: RunConfig, target: Target, model: str) -> Sizing:
    """Calibrate synthetic prompts: local tokenizer, else the target's /tokenize, else none.

    /tokenize counts in the request's own shape, chat template included; a local tokenizer
    file has no chat template, so with it chat prompts are sized without the template's cost.
    """
    mean = config.input_tokens.mean
    if config.tokenizer:
        from tokenizers import Tokenizer  # optional: only for --tokenizer

        encoder = Tokenizer.from_file(config.tokenizer)

        async def encode(text: str) -> int:
            return len(encoder.encode(text).ids)

        sizing = await calibrate(encode, mean, "tokenizer")
    else:
        async with client.session() as http:

            async def tokenize(text: str) -> int | None:
                if config.endpoint == "chat":
                    messages = user_messages(text)
                    return await client.count_tokens(http, target, model, messages=messages)
                return await client.count_tokens(http, target, model, prompt=text)

            sizing = await calibrate(tokenize, mean, "tokenize")
    return sizing or Sizing()


def _meta(
    config: RunConfig, targets: dict[str, dict[str, str]], prompt_sizing: dict[str, Any] | None
) -> dict[str, Any]:
    """What the run was, for the report; `targets` their URLs and models, no headers (they
    may carry credentials)."""
    return {
        "command": config.command,
        "started_at": time.time(),
        "targets": targets,
        "endpoint": config.endpoint,
        "sweep": config.sweep,
        "levels": list(config.levels),
        "shard": list(config.shard),
        "prompt_sizing": prompt_sizing,
        "trace_url": config.trace_url,
        "environment": environment(),
    }


def environment() -> dict[str, Any]:
    """Where the client ran: what its figures may depend on (its own floor, its versions)."""
    try:
        version = importlib.metadata.version("latency-proxy")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "loadgen": version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
