"""`python -m loadgen.sim`: flags (the simulator's own, then vLLM's: vllm_flags/), then uvicorn."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import NoReturn

import uvicorn

from latency_proxy.base.units import parse_duration
from loadgen.sim.model import catalogue, presets
from loadgen.sim.vllm_flags.engine import apply_flags, from_catalogue
from loadgen.sim.vllm_flags.kv_cache import startup_lines
from loadgen.sim.vllm_flags.table import add_arguments, given, refuse
from loadgen.sim.wire import faults
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.auth import api_keys
from loadgen.sim.wire.connection import HttpProtocol
from loadgen.sim.wire.serving import serving_from_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.sim",
        description="A vLLM-like simulated upstream: OpenAI-compatible API, simulated timing. "
        "`python -m loadgen.sim fit --help`: fit a preset to a capture of a deployment.",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--preset", help="a bundled preset (see --list-presets)")
    mode.add_argument("--preset-file", help="a preset TOML file (copy a bundled one)")
    mode.add_argument("--ttft", type=parse_duration, help="fixed mode: time to first token")
    mode.add_argument("--list-presets", action="store_true", help="print preset names and exit")
    mode.add_argument("--list-gpus", action="store_true", help="print the GPU catalogue's ids")
    p.add_argument("--itl", type=parse_duration, help="fixed mode: time between tokens")
    p.add_argument("--seed", type=int, default=0, help="seed for output lengths, text, jitter")
    p.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="scale every step/gap by a seeded uniform factor in [1-F, 1+F]",
    )
    p.add_argument(
        "--script",
        type=json.loads,
        metavar="JSON",
        help="fixed mode, for tests: scripted mode with this default script (an x-script header "
        "per request, faults, /control, /arrivals; see loadgen/sim/wire/script.py)",
    )
    p.add_argument(
        "--fault",
        type=_fault,
        action="append",
        metavar="KIND=RATE[@N][:ARG]",
        help="inject a fault into this share of generation requests, seeded by --seed "
        "(repeatable; an x-fault header per request; see loadgen/sim/wire/faults.py): "
        "error=P[:STATUS] spike=P:DUR cut=P[@N] reset=P[@N] stall=P[@N]:DUR "
        "malformed=P[@N][:text|shape] restart=P:DUR",
    )
    add_arguments(p)
    return p


def _fault(text: str) -> faults.Rule:
    try:
        return faults.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fit"]:
        from loadgen.sim import fit_cli  # the fit's modules stay out of the server's start

        fit_cli.main(argv[1:])
        return
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _fail(refuse(unknown))
    if args.list_presets:
        print("\n".join(presets.names()))
        return
    if args.list_gpus:
        print("\n".join(catalogue.names()))
        return
    if (args.ttft is None) != (args.itl is None):
        parser.error("--ttft and --itl go together")
    names = args.served_model_name or [None]
    if len(names) > 1:
        _fail(f"--served-model-name {' '.join(names)}: the simulator serves one name")
    preset = None
    try:
        base = _base(args)
        if base is not None:
            preset, warnings = apply_flags(base, args)
            for line in warnings + startup_lines(preset):
                print(f"loadgen.sim: {line}", file=sys.stderr)
        elif flags := given(args):
            raise ValueError(f"{' '.join(flags)}: fixed timing has no engine; give a preset")
        app = create_app(
            preset,
            ttft=args.ttft,
            itl=args.itl,
            served_model_name=names[0],
            stream_interval=args.stream_interval,
            seed=args.seed,
            jitter=args.jitter,
            script=args.script,
            faults=args.fault,
            serving=serving_from_flags(args),
            api_keys=api_keys(args, os.environ),
        )
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    sim = app.state.sim
    print(
        f"loadgen.sim: serving {sim.model_name!r} ({sim.description}) "
        f"on http://{args.host}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    # Everything alive now lives as long as the process: keep it out of the cyclic GC, whose
    # full collections would otherwise pause every stream for ~20 ms (bench/sim_capacity.py).
    gc.collect()
    gc.freeze()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        http=HttpProtocol,  # httptools, handing the faults the connection (connection.py)
        # the default loop, not uvloop: uvloop costs less CPU per event, but its timers kept
        # the engine's schedule worse (72% vs 97% of steps within 2 ms, bench/sim_capacity.py)
        loop="asyncio",
        timeout_graceful_shutdown=1,
    )


def _base(args: argparse.Namespace) -> presets.Preset | None:
    """The preset --preset, --preset-file or --gpu with --model-config names; None: fixed
    timing. ValueError for none of them (nor --ttft), or a preset with --gpu."""
    derived = from_catalogue(args)
    named = args.preset_file or args.preset
    if derived is not None and (named or args.ttft is not None):
        other = "--preset-file" if args.preset_file else "--preset" if args.preset else "--ttft"
        raise ValueError(f"--gpu with {other}: give one of them")
    if derived is None and not named and args.ttft is None:
        raise ValueError("give --preset, --preset-file, --gpu with --model-config, or --ttft")
    if args.preset_file:
        return presets.load_file(args.preset_file)
    return presets.load(args.preset) if args.preset else derived


def _fail(message: str) -> NoReturn:
    print(f"loadgen.sim: {message}", file=sys.stderr)
    raise SystemExit(2)
