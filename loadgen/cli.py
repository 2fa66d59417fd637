"""`python -m loadgen`: flags in, a run directory out (requests.jsonl, summary.json, report.md).

Subcommands `compare` and `merge` live in their own modules; everything else is a load run.
A run is: resolve targets (URLs, built-in names, a targets file; --embedded starts its own),
calibrate prompt lengths, drive blocks of load per level, summarise, report.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

from latency_proxy.units import parse_duration, parse_size
from loadgen import client, compare, embedded, gpu_metrics, merge, report, rundir, sync
from loadgen.progress import Progress
from loadgen.records import RunData, SummarySettings
from loadgen.runner import Load, Runner
from loadgen.schedule import ARRIVALS, plan, shard_count
from loadgen.sizing import calibrate
from loadgen.slo import parse_slos
from loadgen.summary import summarize
from loadgen.targets import Target, load_file, resolve
from loadgen.workload import Lengths, Sizing, Workload, load_dataset, user_messages

DEFAULT_CONCURRENCY = 8
DEFAULT_DURATION = "15s"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EPILOG = """\
defaults make a quick run (8 concurrent streams, 15 s per target after 2 s warmup, 512 input /
64 output tokens). The seeds' methodology is one flag set away:
  --concurrency 100 --input-tokens 512 --output-tokens 256 --duration 10m --warmup 30s
subcommands:
  python -m loadgen compare RUN_DIR RUN_DIR [...]   side by side, differences with CIs, verdicts
  python -m loadgen merge RUN_DIR [...] --out DIR   exact merge of shards (--shard i/N runs)
"""


def _levels(text: str, kind: type) -> list:
    values = [kind(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need positive values: {text!r}")
    return values


def _shard(text: str) -> tuple[int, int]:
    """`i/N`, or `N` with the index from $JOB_COMPLETION_INDEX (a Kubernetes Indexed Job)."""
    index, sep, count = text.partition("/")
    if not sep:
        index, count = os.environ.get("JOB_COMPLETION_INDEX", ""), text
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a shard: {text!r} (use i/N, or N with JOB_COMPLETION_INDEX set)"
        ) from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"shard index {i} is not in 0..{n - 1}")
    return i, n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadgen",
        description="Drive OpenAI-compatible streaming endpoints; compare TTFT/TPOT/ITL/E2E.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --workers rewrites the command line for its children
    )
    t = p.add_argument_group("targets")
    t.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL|NAME",
        help="a base URL, proxy ($LATENCY_PROXY_URL or http://127.0.0.1:8080), direct "
        "($VLLM_URL or http://127.0.0.1:8000) or a --targets-file name; repeat to "
        "compare (default: proxy)",
    )
    t.add_argument("--targets-file", metavar="FILE.toml", help="named targets (see examples/)")
    t.add_argument("--model", help="model to ask for (default: the target's, else /v1/models)")
    t.add_argument(
        "--embedded",
        action="store_true",
        help="start the simulator and the proxy on free loopback ports; proxy and "
        "direct then name them, and --target proxy measures direct as well",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    w.add_argument(
        "--input-tokens",
        type=Lengths.parse,
        default=Lengths(512, 512),
        metavar="N|LO-HI",
        help="prompt length (default 512)",
    )
    w.add_argument(
        "--output-tokens",
        type=Lengths.parse,
        default=Lengths(64, 64),
        metavar="N|LO-HI",
        help="max_tokens (default 64)",
    )
    w.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ask vLLM to produce exactly max_tokens (default on)",
    )
    w.add_argument("--temperature", type=float, default=0.0)
    w.add_argument(
        "--dataset", metavar="FILE", help="JSONL of {prompt} or {messages}, or ShareGPT JSON"
    )
    w.add_argument(
        "--tokenizer",
        metavar="tokenizer.json",
        help="size synthetic prompts with this local tokenizer instead of /tokenize "
        "(it has no chat template: chat prompts then come out longer by the template)",
    )
    load = p.add_argument_group("load")
    load.add_argument(
        "--concurrency",
        type=lambda s: _levels(s, int),
        metavar="N[,N…]",
        help=f"closed loop: N streams; a list sweeps (default {DEFAULT_CONCURRENCY})",
    )
    load.add_argument(
        "--rate",
        type=lambda s: _levels(s, float),
        metavar="R[,R…]",
        help="open loop: R requests/s; a list sweeps",
    )
    load.add_argument("--arrival", choices=ARRIVALS, default="poisson")
    load.add_argument(
        "--gamma-shape",
        type=float,
        default=0.5,
        help="burstiness of --arrival gamma (<1 burstier than poisson)",
    )
    load.add_argument(
        "--duration",
        type=parse_duration,
        help=f"measured time per target and level (default {DEFAULT_DURATION})",
    )
    load.add_argument("--requests", type=int, help="measured requests per target and level")
    load.add_argument(
        "--warmup",
        type=parse_duration,
        default=2.0,
        help="excluded from results, per target; later blocks ramp up again over at most "
        "this (default 2s)",
    )
    load.add_argument(
        "--blocks",
        type=int,
        help="interleaved blocks per target (default 1, or 2 with several: A, B, A, B)",
    )
    load.add_argument(
        "--workers", type=int, default=1, help="spread the load over N processes, one merged result"
    )
    load.add_argument(
        "--shard",
        type=_shard,
        metavar="i/N",
        help="run shard i of N (or N, index from $JOB_COMPLETION_INDEX); combine with `merge`",
    )
    load.add_argument(
        "--sync-dir",
        metavar="DIR",
        help="shards wait for each other in DIR (a shared volume; fresh per run) and start "
        "their load at the same moment (--workers does this on its own)",
    )
    load.add_argument(
        "--sync-timeout",
        type=parse_duration,
        default=600.0,
        help="how long a shard waits for the others in --sync-dir (default 10m)",
    )
    load.add_argument(
        "--timeout", type=parse_duration, default=600.0, help="per request (default 10m)"
    )
    load.add_argument("--seed", type=int, default=0)
    r = p.add_argument_group("results")
    r.add_argument("--out", metavar="DIR", help="default loadgen-runs/<time>")
    r.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC=DURATION",
        help="ttft, tpot or e2e (default ttft=800ms tpot=50ms)",
    )
    r.add_argument(
        "--gpu-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a DCGM exporter's /metrics to sample (repeatable)",
    )
    r.add_argument("--gpu-interval", type=parse_duration, default=1.0)
    r.add_argument("--weight-bytes", type=parse_size, help="model weights, e.g. 140GB (for MBU)")
    r.add_argument("--kv-bytes-per-token", type=parse_size, default=0)
    r.add_argument(
        "--gpu-bandwidth",
        type=parse_size,
        metavar="BYTES_PER_S",
        help="peak memory bandwidth per GPU, e.g. 2039GB (for MBU)",
    )
    r.add_argument("--gpus", type=int, default=1)
    r.add_argument(
        "--max-send-lag",
        type=parse_duration,
        default=0.025,
        help="client send lag P99 above this marks the run invalid (default 25ms)",
    )
    r.add_argument(
        "--max-loop-lag",
        type=parse_duration,
        default=0.025,
        help="client event-loop lag P99 above this marks it invalid (default 25ms)",
    )
    r.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live progress line (default: when stderr is a terminal)",
    )
    return p


def _settings(args: argparse.Namespace) -> SummarySettings:
    return SummarySettings(
        slo=parse_slos(args.slo),
        max_send_lag_s=args.max_send_lag,
        max_loop_lag_s=args.max_loop_lag,
        weight_bytes=args.weight_bytes,
        kv_bytes_per_token=args.kv_bytes_per_token,
        gpu_bandwidth_bytes_s=args.gpu_bandwidth,
        gpus=args.gpus,
        seed=args.seed,
    )


async def _models(args: argparse.Namespace, targets: dict[str, Target]) -> dict[str, str]:
    models = {}
    async with client.session() as http:
        for name, target in targets.items():
            model = args.model or target.model or await client.first_model(http, target)
            if model is None:
                raise SystemExit(
                    f"loadgen: {name} ({target.url}): no --model given, and its /v1/models "
                    "did not name one (is it running?)"
                )
            models[name] = model
    return models


async def _prompt_sizing(args: argparse.Namespace, target: Target, model: str) -> Sizing:
    """Calibrate synthetic prompts: local tokenizer, else the target's /tokenize, else none.

    /tokenize counts in the request's own shape, chat template included; a local tokenizer
    file has no chat template, so with it chat prompts are sized without the template's cost.
    """
    mean = args.input_tokens.mean
    if args.tokenizer:
        from tokenizers import Tokenizer  # optional: only for --tokenizer

        encoder = Tokenizer.from_file(args.tokenizer)

        async def encode(text: str) -> int:
            return len(encoder.encode(text).ids)

        sizing = await calibrate(encode, mean, "tokenizer")
    else:
        async with client.session() as http:

            async def tokenize(text: str) -> int | None:
                if args.endpoint == "chat":
                    messages = user_messages(text)
                    return await client.count_tokens(http, target, model, messages=messages)
                return await client.count_tokens(http, target, model, prompt=text)

            sizing = await calibrate(tokenize, mean, "tokenize")
    return sizing or Sizing()


async def execute(
    args: argparse.Namespace, targets: dict[str, Target], gpu_urls: list[str]
) -> RunData:
    """One process's share of the load, all levels; returns the raw data."""
    shard, shards = args.shard or (0, 1)
    models = await _models(args, targets)
    first = next(iter(targets))
    rng = np.random.default_rng([args.seed, shard])
    workload = Workload(
        endpoint=args.endpoint,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        rng=rng,
        dataset=load_dataset(args.dataset) if args.dataset else None,
        sizing=Sizing()
        if args.dataset
        else await _prompt_sizing(args, targets[first], models[first]),
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
    )
    progress = Progress(label=f"shard {shard}/{shards}" if shards > 1 else "")
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    runner = Runner(targets, models, workload, rng, args.timeout, shard, progress)
    data = RunData(settings=_settings(args), meta=_meta(args, targets, models, workload))
    helpers = []
    if show:
        helpers.append(asyncio.create_task(progress.draw()))
    if gpu_urls and shard == 0:  # one sampler per run, not per shard
        helpers.append(
            asyncio.create_task(
                gpu_metrics.sample(gpu_urls, args.gpu_interval, runner.clock, data.gpu)
            )
        )
    blocks_per_target = args.blocks or (2 if len(targets) > 1 else 1)
    if args.sync_dir:
        at = await sync.start_together(Path(args.sync_dir), shard, shards, args.sync_timeout)
        data.meta["synced_start_at"] = at
    stop_on_signal(runner, data.meta)
    try:
        for level in args.concurrency or args.rate:
            if runner.stopped:
                runner.cut_short()
                break
            if args.concurrency:
                load = Load(concurrency=shard_count(level, shard, shards))
            else:
                load = Load(rate=level / shards, arrival=args.arrival, gamma_shape=args.gamma_shape)
            requests = shard_count(args.requests, shard, shards) if args.requests else None
            blocks = plan(list(targets), blocks_per_target, args.warmup, args.duration, requests)
            await runner.run(blocks, load, sweep_level=level)
    finally:
        default_signal_handlers()
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    data.records = runner.result.records
    data.phases = runner.result.phases
    data.loop_lag = runner.result.loop_lag
    return data


def default_signal_handlers() -> None:
    """Give Ctrl-C and SIGTERM back their default effect (stop at once)."""
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.remove_signal_handler(signum)


def stop_on_signal(runner: Runner, meta: dict[str, Any]) -> None:
    """The first Ctrl-C or SIGTERM ends the run early and keeps what was measured; a second
    one stops at once (the default handlers are back)."""
    loop = asyncio.get_running_loop()

    def interrupt(signum: signal.Signals) -> None:
        default_signal_handlers()
        meta["interrupted_by"] = signum.name
        runner.stop()
        print(
            f"\nloadgen: {signum.name}: ending the run, keeping what was measured "
            "(again to stop at once)",
            file=sys.stderr,
        )

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, interrupt, signum)


def _meta(
    args: argparse.Namespace, targets: dict[str, Target], models: dict[str, str], w: Workload
) -> dict[str, Any]:
    """What the run was, for the report; no headers (they may carry credentials)."""
    return {
        "command": _command(args),
        "started_at": time.time(),
        "targets": {n: {"url": t.url, "model": models[n]} for n, t in targets.items()},
        "endpoint": args.endpoint,
        "sweep": "concurrency" if args.concurrency else "rate",
        "levels": args.concurrency or args.rate,
        "shard": list(args.shard or (0, 1)),
        "prompt_sizing": None if w.dataset else w.sizing.meta(),
    }


def _command(args: argparse.Namespace) -> str:
    return "python -m loadgen " + shlex.join(args.argv)


def _child_argv(args: argparse.Namespace, specs: list[str], out: Path, index: int) -> list[str]:
    """The command line of worker `index`: this one, minus what the parent handles."""
    drop_with_value = {"--workers", "--out", "--target", "--model", "--gpu-metrics", "--sync-dir"}
    drop = {"--embedded", "--progress", "--no-progress"}
    argv, skip = [], False
    for item in args.argv:
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in drop_with_value:
            skip = "=" not in item
            continue
        if name not in drop:
            argv.append(item)
    for spec in specs:
        argv += ["--target", spec]
    if args.model:
        argv += ["--model", args.model]
    shard_out = out / "shards" / f"shard-{index}"
    return [
        sys.executable,
        "-m",
        "loadgen",
        *argv,
        "--shard",
        f"{index}/{args.workers}",
        "--out",
        str(shard_out),
        "--sync-dir",
        str(out / "shards" / "sync"),
        "--no-progress",
    ]


def run_workers(
    args: argparse.Namespace, specs: list[str], out: Path, env: dict[str, str], gpu: list[str]
) -> tuple[RunData, dict]:
    """--workers N: N shard processes started together, then merged exactly.

    Workers run in sessions of their own, so a Ctrl-C or SIGTERM reaches only this process,
    which passes each one on to every worker: the first ends their runs early (each writes
    what it measured, merged as usual), a second stops them at once.
    """
    children: list[subprocess.Popen] = []
    signals: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        signals.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        for index in range(args.workers):
            if signals:
                break
            argv = _child_argv(args, specs, out, index)
            if index == 0:
                argv += [item for url in gpu for item in ("--gpu-metrics", url)]
            children.append(
                subprocess.Popen(argv, env={**os.environ, **env}, start_new_session=True)
            )
        failed = [c.args for c in children if c.wait() != 0]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for child in children:
            embedded.stop(child)
    shard_dirs = [out / "shards" / f"shard-{i}" for i in range(len(children))]
    if signals:
        shard_dirs = [d for d in shard_dirs if (d / rundir.RUN).exists()]
        if not shard_dirs:
            raise KeyboardInterrupt
    elif failed:
        raise SystemExit(f"loadgen: {len(failed)} worker(s) failed")
    return merge.merge_dirs(shard_dirs, out, command=_command(args))


def run(args: argparse.Namespace, out: Path, stack: embedded.Stack | None) -> dict:
    specs = list(dict.fromkeys(args.target or ["proxy"]))
    overrides: dict[str, str] = {}
    gpu = list(args.gpu_metrics)
    if stack is not None:
        overrides = {"proxy": stack.proxy, "direct": stack.direct}
        if "proxy" in specs and "direct" not in specs:
            # direct first: the baseline of the report's comparison shows what the proxy costs
            specs.insert(specs.index("proxy"), "direct")
        gpu = gpu or [stack.metrics]
    if args.workers > 1:
        env = {
            "LATENCY_PROXY_URL": overrides.get("proxy", ""),
            "VLLM_URL": overrides.get("direct", ""),
        }
        _, summary = run_workers(args, specs, out, {k: v for k, v in env.items() if v}, gpu)
        return summary
    file_targets = load_file(args.targets_file) if args.targets_file else None
    targets = {}
    for spec in specs:
        target = resolve(spec, file_targets, overrides=overrides)
        targets[target.name] = target
    data = uvloop.run(execute(args, targets, gpu))
    if not data.phases:
        raise KeyboardInterrupt  # stopped before any load was sent: nothing to write
    summary = summarize(
        data.records, data.phases, data.loop_lag, data.gpu, data.settings, data.meta["sweep"]
    )
    rundir.write(out, data, summary)
    report.write(out, data, summary, compare.of_run(data, summary))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:
        return compare.main(argv[1:])
    if argv[:1] == ["merge"]:
        return merge.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.concurrency and args.rate:
        parser.error("give --concurrency or --rate, not both")
    if args.duration is not None and args.requests is not None:
        parser.error("give --duration or --requests, not both")
    if not args.concurrency and not args.rate:
        args.concurrency = [DEFAULT_CONCURRENCY]
    if args.duration is None and args.requests is None:
        args.duration = parse_duration(DEFAULT_DURATION)
    out = Path(args.out or Path("loadgen-runs") / time.strftime("%Y%m%d-%H%M%S"))
    try:
        if args.embedded:
            with embedded.stack(out / "embedded") as stack:
                summary = run(args, out, stack)
        else:
            summary = run(args, out, None)
    except KeyboardInterrupt:
        print("\nloadgen: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    print(report.console_table(summary))
    print(f"results: {out}/ (summary.json, requests.jsonl, report.md)")
    if summary["interrupted"]:
        print("loadgen: interrupted: partial results, marked invalid", file=sys.stderr)
        return 130
    return 0
