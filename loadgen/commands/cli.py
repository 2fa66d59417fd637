"""`python -m loadgen`: flags in, a run directory out (requests.jsonl, summary.json, report.md).

Subcommands `compare`, `report` and `sessions` live in modules of their own beside this one
(`merge` in shards/merge.py); everything else is a load run, or a search of load runs
(`capacity`, which takes the run's flags but no levels; `plan`, a search of searches). This
module is the parser only: the flags become one RunConfig (runs/config.py), and run.py
(capacity.py, plan.py) does the run (the search) from that.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from latency_proxy.base.units import parse_duration
from loadgen.analysis.records import SummarySettings
from loadgen.analysis.slo import parse_slos
from loadgen.commands import capacity, compare, plan, report, run, sessions
from loadgen.engine import flags, probes
from loadgen.inputs import bounds
from loadgen.replay import flags as replay_flags
from loadgen.runs.config import DEFAULT_CONCURRENCY, DEFAULT_DURATION, DEFAULT_WARMUP, RunConfig
from loadgen.shards import merge

EPILOG = f"""\
defaults make a quick run ({DEFAULT_CONCURRENCY} concurrent streams, {DEFAULT_DURATION} per \
target after {DEFAULT_WARMUP:g}s warmup, \
{flags.shown("--input-tokens")} input / {flags.shown("--output-tokens")} output tokens).
A long comparative run (100 streams, 512 input / 256 output tokens, 10 minutes per target):
  --concurrency 100 --input-tokens 512 --output-tokens 256 --duration 10m --warmup 30s
and real traffic one flag: --replay FILE (an Azure LLM inference CSV, Mooncake JSONL, a run's
requests.jsonl or the proxy's log), --slice 1m for its stretches
subcommands:
  python -m loadgen compare RUN_DIR RUN_DIR [...]   side by side, differences with CIs, verdicts
  python -m loadgen merge RUN_DIR [...] --out DIR   exact merge of shards (--shard i/N runs)
  python -m loadgen report DIR [...]                rebuild report.md, report.html and plots
  python -m loadgen sessions CAPTURE [--json]       agents' sessions in a proxy capture
  python -m loadgen capacity --target A [...] --slo ttft=800ms@p90 [--by rate|concurrency]
                                                    (or --replay FILE --by speed)
                                                    the most load that meets the SLOs, steady
  python -m loadgen plan --replay FILE --slo ttft=800ms@p90 --candidates PLAN.toml
                                                    the cheapest deployment that meets them
"""
RUN = "Drive OpenAI-compatible streaming endpoints; compare TTFT/TPOT/ITL/E2E."
CAPACITY = "Find, per target, the most load at which every SLO holds and the server keeps up."
CAPACITY_EPILOG = """\
each probe is a run of one target at one level, in DIR/probe-NN-<target>-<level>/, with its
own arrival seed; targets take turns level by level. A probe warms up for at least --warmup
and then until the in-flight count stops growing (at most 30 s), then measures at least 10
request durations and --requests (default: the fewest requests that bound each SLO's
percentile from both sides at 95%: P90 36, P99 368; --duration: at least that long). It
meets when every SLO's 95% interval lies under its limit and it is steady, fails when one
lies above or it saturated, and is otherwise undecided and run again twice as long (twice
at most); the bracket uses decided probes only and is bisected to within 5%.
"""


def build_parser(search: bool = False, plan: bool = False) -> argparse.ArgumentParser:
    """The run's flags; with `search`, the capacity command's (levels come from the search);
    with `plan`, the plan command's (targets come from its candidates, the traffic is a
    --replay or --rate)."""
    prog, description, epilog = "python -m loadgen", RUN, EPILOG
    if search:
        prog, description, epilog = "python -m loadgen capacity", CAPACITY, CAPACITY_EPILOG
    if plan:
        prog, description, epilog = "python -m loadgen plan", PLAN, PLAN_EPILOG
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # flags in full: an abbreviation would break when a flag is added
    )
    if plan:
        flags.add(p.add_argument_group("candidates"), flags.PLAN)
        p.set_defaults(**flags.defaults(flags.TARGETS))  # the candidates stand for them
    else:
        flags.add(p.add_argument_group("targets"), flags.TARGETS)
    w = p.add_argument_group("workload")
    flags.add(w, flags.WORKLOAD)
    flags.add(w, flags.CONVERSATION)
    load = p.add_argument_group("load")
    if plan:
        flags.add(load, ("--budget", "--probe-pngs"))
        load.set_defaults(by="speed", start=1.0, repeat=0, concurrency=None)
        load.add_argument(
            "--rate",
            type=bounds.RATE,
            metavar="R",
            help="without --replay: the traffic is R requests/s of the workload flags",
        )
    elif search:
        flags.add(load, flags.SEARCH)
        load.set_defaults(concurrency=None, rate=None)
    else:
        load.add_argument(
            "--concurrency",
            type=bounds.levels(bounds.STREAMS),
            metavar="N[,N…]",
            help=f"closed loop: N streams; a list sweeps (default {DEFAULT_CONCURRENCY})",
        )
        load.add_argument(
            "--rate",
            type=bounds.levels(bounds.RATE),
            metavar="R[,R…]",
            help="open loop: R requests/s; a list sweeps",
        )
    replay_flags.add_flags(p.add_argument_group("replay"))
    # a plan's searches run on the twin, in processes of their own: what a virtual: target
    # refuses, or what reads a server beside the run, is not offered
    beside = (*flags.CHECKED, *flags.SPREAD, *flags.READ_BESIDE)
    if plan:
        p.set_defaults(**flags.defaults(beside))
    else:
        flags.add(p.add_argument_group("answers and cost"), flags.CHECKED)
    flags.add(load, ("--arrival", "--gamma-shape"))
    load.add_argument(
        "--duration",
        type=bounds.duration(),
        help=f"measured time per target and level (default {DEFAULT_DURATION})",
    )
    flags.add(load, ("--requests",))
    load.add_argument(
        "--warmup",
        type=bounds.duration(positive=False),
        help="excluded from results, per target; later blocks ramp up again over at most "
        f"this (default {DEFAULT_WARMUP:g}s; a replay: 0, the window's head is measured)",
    )
    flags.add(load, flags.REQUESTS)
    r = p.add_argument_group("results")
    flags.add(r, flags.RESULTS)
    if not plan:
        flags.add(load, flags.SPREAD)
        flags.add(r, flags.READ_BESIDE)
    return p


PLAN = "Find the cheapest deployment that meets the SLOs for this traffic, on the simulator's twin."
PLAN_EPILOG = """\
each candidate (a preset with engine flags, on GPUs at a price) is checked for memory and
against roofline bounds first; each one left is sized by capacity searches on the virtual
clock (the same search as `python -m loadgen capacity --target virtual:…`, each in
DIR/candidates/<name>/replicas-N/): the fewest replicas that hold the traffic (times
1 + --headroom) with every SLO met. Ranked by $/hour; plan.json, plan.md, plan.html.
"""


def config_from(args: argparse.Namespace, argv: Sequence[str]) -> RunConfig:
    """The run the flags ask for, defaults filled in; raises ValueError for a bad --slo."""
    slos = parse_slos(args.slo)
    replay = replay_flags.settings(args)
    # a replay without a window bound replays the whole trace
    neither = args.duration is None and args.requests is None and replay is None
    if replay is not None:
        sweep, levels = "replay", (replay.speed,)
    else:
        sweep = "rate" if args.rate else "concurrency"
        levels = tuple(args.rate or args.concurrency or [DEFAULT_CONCURRENCY])
    warmup = args.warmup if args.warmup is not None else (0.0 if replay else DEFAULT_WARMUP)
    return RunConfig(
        command="python -m loadgen " + shlex.join(argv),  # argv keeps a subcommand's name
        out=Path(args.out or Path("loadgen-runs") / time.strftime("%Y%m%d-%H%M%S")),
        targets=tuple(dict.fromkeys(args.target or ["proxy"])),
        targets_file=args.targets_file,
        model=args.model,
        embedded=args.embedded,
        overrides={},
        virtual_args=args.virtual_args,
        virtual_replicas=args.virtual_replicas,
        virtual_budget_s=args.virtual_budget,
        endpoint=args.endpoint,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        dataset=args.dataset,
        tokenizer=args.tokenizer,
        prompt_seed=args.prompt_seed,
        shared_prefix_tokens=args.shared_prefix_tokens,
        turns=args.turns,
        think_time=args.think_time,
        sweep=sweep,
        levels=levels,
        arrival=args.arrival,
        gamma_shape=args.gamma_shape,
        duration_s=parse_duration(DEFAULT_DURATION) if neither else args.duration,
        requests=args.requests,
        warmup_s=warmup,
        drain_s=flags.read(args, "--drain"),
        blocks=args.blocks,
        timeout_s=args.timeout,
        stall_threshold_s=args.stall_threshold,
        replay=replay,
        probes=probes.settings(args),
        workers=args.workers,
        shard=args.shard or (0, 1),
        sync_dir=Path(args.sync_dir) if args.sync_dir else None,
        sync_timeout_s=args.sync_timeout,
        summary=SummarySettings(
            slo=slos.limits,
            slo_percentiles=slos.percentiles,
            max_send_lag_s=args.max_send_lag,
            max_loop_lag_s=args.max_loop_lag,
            weight_bytes=args.weight_bytes,
            kv_bytes_per_token=args.kv_bytes_per_token,
            gpu_bandwidth_bytes_s=args.gpu_bandwidth,
            gpus=args.gpus,
            gpu_hour_price=args.gpu_hour_price,
            seed=args.seed,
            slice_s=args.slice,
        ),
        gpu_metrics=tuple(args.gpu_metrics),
        gpu_interval_s=args.gpu_interval,
        server_metrics=tuple(args.server_metrics),
        trace_url=args.trace_url,
        progress=args.progress if args.progress is not None else sys.stderr.isatty(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:
        return compare.main(argv[1:])
    if argv[:1] == ["merge"]:
        return merge.main(argv[1:])
    if argv[:1] == ["report"]:
        return report.main(argv[1:])
    if argv[:1] == ["sessions"]:
        return sessions.main(argv[1:])
    if argv[:1] == ["capacity"]:
        return _capacity(argv)
    if argv[:1] == ["plan"]:
        return _plan(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if sum(map(bool, (args.concurrency, args.rate, args.replay))) > 1:
        parser.error("give one of --concurrency, --rate and --replay")
    config = _configured(parser, args, argv)
    return 2 if config is None else run.main(config)


def _configured(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str]
) -> RunConfig | None:
    """The RunConfig of parsed flags; None, after saying why, when an --slo is bad."""
    if args.duration is not None and args.requests is not None:
        parser.error("give --duration or --requests, not both")
    if args.turns > 1 and (args.endpoint != "chat" or args.replay):
        parser.error("--turns: conversations are chat requests, not a replay's")
    if args.trace_url is not None and "{trace_id}" not in args.trace_url:
        parser.error("--trace-url needs {trace_id} where the trace id goes")
    if args.shared_prefix_tokens and args.dataset:
        parser.error("--shared-prefix-tokens: for synthetic prompts (no --dataset)")
    try:
        return config_from(args, argv)
    except ValueError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return None


def _capacity(argv: Sequence[str]) -> int:
    found = capacity_request(argv)
    return found if isinstance(found, int) else capacity.main(*found)


def capacity_request(argv: Sequence[str]) -> tuple[RunConfig, capacity.CapacityConfig] | int:
    """What `python -m loadgen capacity …` (argv with its subcommand) asks for; 2 after
    saying why for a bad --slo (argparse exits on the rest). The plan runs each of its
    searches from such an argv, so each is the command a person would type."""
    parser = build_parser(search=True)
    args = parser.parse_args(argv[1:])
    if (args.by == "speed") != bool(args.replay):
        parser.error("--by speed searches a --replay's speed; a --replay is searched by speed")
    if args.by == "concurrency" and args.start != int(args.start):
        parser.error("--by concurrency starts at a whole number of streams")
    if args.floor is not None and args.floor > args.start:
        parser.error(f"--floor {args.floor:g} is above --start {args.start:g}")
    if args.ceiling is not None and args.ceiling < args.start:
        parser.error(f"--ceiling {args.ceiling:g} is below --start {args.start:g}")
    config = _configured(parser, args, argv)
    if config is None:
        return 2
    search = capacity.CapacityConfig(
        by=args.by,
        start=args.start,
        floor=args.floor,
        ceiling=args.ceiling,
        budget_s=args.budget,
        probe_requests=args.requests,
        min_probe_s=args.duration,
        repeat=args.repeat,
        probe_pngs=args.probe_pngs is not False,
    )
    if args.by != "speed":
        config = replace(config, sweep=args.by, levels=(args.start,))
    return config, search


def _plan(argv: Sequence[str]) -> int:
    parser = build_parser(plan=True)
    args = parser.parse_args(argv[1:])
    if bool(args.replay) == bool(args.rate):
        parser.error("the traffic is a --replay or a --rate (one of them)")
    traffic = args.rate
    args.rate = [traffic] if traffic else None  # a run's --rate is a list of levels
    config = _configured(parser, args, argv)
    if config is None:
        return 2
    return plan.main(config, plan.settings(args, argv[1:], traffic, capacity_request))
