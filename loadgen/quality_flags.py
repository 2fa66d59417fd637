"""--eval, --consistency, --gpu-hour-price and their companions: defined once, and the
settings they make. Bad values stop the run before any load (exit 2)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from loadgen import evals
from loadgen.probes import ProbeSettings

MAX_CONSISTENCY = 10_000


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--eval",
        metavar="FILE|builtin:NAME",
        help="check answers under the load: a JSON-lines file of {messages|prompt, answer, "
        "match, max_tokens}, or a built-in canary (builtin:arithmetic, builtin:copy), "
        "sent greedy; summary.json gets each target's accuracy with its 95%% interval",
    )
    group.add_argument(
        "--eval-fraction",
        type=float,
        metavar="F",
        help="share of each target's requests that are eval items, in (0, 1] (default 1: "
        "every request; below 1 the rest is the ordinary workload)",
    )
    group.add_argument(
        "--consistency",
        type=int,
        default=0,
        metavar="N",
        help="send N fixed prompts greedy alone first, then again inside the load: the share "
        "whose output is identical, and where the others first differ",
    )
    group.add_argument(
        "--content-capture",
        action="store_true",
        help="keep eval and consistency outputs (and the expected text) in requests.jsonl; "
        "off: only ids, verdicts, keyed hashes and positions are written",
    )
    group.add_argument(
        "--gpu-hour-price",
        type=float,
        metavar="USD",
        help="price of one GPU for an hour: with --gpus, $ per million output and input "
        "tokens at the measured throughput",
    )


def settings(args: Any) -> ProbeSettings | None:
    """The flags' ProbeSettings (None: neither --eval nor --consistency); ValueError, naming
    the flag or the file's line, for anything that would not run."""
    if args.eval_fraction is not None and args.eval is None:
        raise ValueError("--eval-fraction needs --eval")
    fraction = 1.0 if args.eval_fraction is None else args.eval_fraction
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise ValueError(f"--eval-fraction {fraction:g}: must be in (0, 1]")
    if not 0 <= args.consistency <= MAX_CONSISTENCY:
        raise ValueError(f"--consistency {args.consistency}: must be in [0, {MAX_CONSISTENCY}]")
    if args.gpus < 1:
        raise ValueError(f"--gpus {args.gpus}: must be at least 1")
    price = args.gpu_hour_price
    if price is not None and not (math.isfinite(price) and 0 < price < 1e6):
        raise ValueError(f"--gpu-hour-price {price:g}: must be a positive price below 1e6")
    if args.eval is None and not args.consistency:
        if args.content_capture:
            raise ValueError("--content-capture keeps --eval and --consistency outputs: give one")
        return None
    if args.replay or args.turns > 1 or args.workers > 1 or args.shard:
        raise ValueError("--eval and --consistency run in one process, without --replay or --turns")
    if args.eval is not None:
        evals.load(args.eval, args.seed)  # a bad file stops the run here, before any load
        if args.eval_fraction is None and args.dataset:
            raise ValueError("--eval with --dataset: give --eval-fraction to mix the two")
    return ProbeSettings(
        eval=args.eval,
        eval_fraction=fraction,
        consistency=args.consistency,
        content_capture=args.content_capture,
    )
