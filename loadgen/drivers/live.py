"""The load sent to servers: the engine's runner, over sockets, in real time. One process's
share of it (a --workers run is several of these, merged).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import numpy as np
import uvloop

from loadgen import replay
from loadgen.analysis import evals
from loadgen.analysis.records import Record, RunData
from loadgen.drivers.meta import run_meta
from loadgen.engine import client
from loadgen.engine.interrupt import default_signal_handlers, stop_on_signal
from loadgen.engine.probes import Probes
from loadgen.engine.progress import Progress
from loadgen.engine.runner import Runner
from loadgen.engine.schedule import Block, Load, plan, shard_count
from loadgen.engine.sizing import calibrate
from loadgen.engine.targets import Target, load_file, resolve
from loadgen.engine.workload import Workload
from loadgen.inputs.prompt_text import Prompt, Sizing, shared_prefix, user_messages
from loadgen.runs.config import RunConfig
from loadgen.shards import sync
from loadgen.stack import gpu_metrics


def drive(
    config: RunConfig, trace: replay.Replay | None, dataset: list[Prompt] | None = None
) -> RunData:
    """The load on the run's targets, as servers answer it."""
    file_targets = load_file(config.targets_file) if config.targets_file else None
    targets = {}
    for spec in config.targets:
        target = resolve(spec, file_targets, overrides=config.overrides)
        targets[target.name] = target
    return uvloop.run(execute(config, targets, dataset, trace))


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
    workload = _workload(config, rng, dataset, sizing, prompt_seed)
    progress = Progress(label=f"shard {shard}/{shards}" if shards > 1 else "")
    runner = Runner(
        targets,
        models,
        workload,
        rng,
        config.timeout_s,
        shard,
        stall_threshold_s=config.stall_threshold_s,
        on_record=progress,
        drain_s=config.drain_s,
    )
    trace = await _replayed(config, loaded, runner, sizing, prompt_seed) if loaded else None
    if config.probes is not None:
        runner.probes = await _probes(config, runner)
    if shard == 0:  # one sampler per run, not per shard: shards share the servers
        runner.server_metrics = config.server_metrics
    served = {n: {"url": t.url, "model": models[n]} for n, t in targets.items()}
    sizing_meta = None if workload.dataset else workload.sizing.meta()
    data = RunData(settings=config.summary, meta=run_meta(config, served, sizing_meta))
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
    if config.sync_dir:
        at = await sync.start_together(config.sync_dir, shard, shards, config.sync_timeout_s)
        data.meta["synced_start_at"] = at
    stop_on_signal(runner, data.meta)
    try:
        await _levels(config, runner, list(targets), trace)
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


def _workload(
    config: RunConfig,
    rng: np.random.Generator,
    dataset: list[Prompt] | None,
    sizing: Sizing,
    prompt_seed: int,
) -> Workload:
    """What this shard sends: the run's lengths, prompts and turns, on its own streams."""
    shard = config.shard[0]
    return Workload(
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


async def _levels(
    config: RunConfig, runner: Runner, names: list[str], trace: replay.Replay | None
) -> None:
    """The replay's blocks, or each load level's, this shard's share of each; a run
    interrupted between levels stops there."""
    shard, shards = config.shard
    blocks_per_target = config.blocks or (2 if len(names) > 1 else 1)
    if trace is not None:
        await _replay_blocks(runner, trace, names, blocks_per_target, config)
        return
    for level in config.levels:
        if runner.stopped:
            runner.cut_short()
            break
        if config.sweep == "concurrency":
            load = Load(concurrency=shard_count(int(level), shard, shards))
        else:
            load = Load(rate=level / shards, arrival=config.arrival, gamma_shape=config.gamma_shape)
        requests = shard_count(config.requests, shard, shards) if config.requests else None
        blocks = plan(
            names, blocks_per_target, config.warmup_s, config.duration_s, requests, config.settle
        )
        await runner.run(blocks, load, sweep_level=level)


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
        measured = replay.sessions.measured(replay.sessions.graph(mine), config.warmup_s)
        plan_ = [Block(name, index, config.warmup_s, None, measured) for name in names]
        load = Load(replay=mine, gap_scale=config.replay.gap_scale if config.replay else 1.0)
        await runner.run(plan_, load, sweep_level=speed)


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
