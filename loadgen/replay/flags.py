"""--replay and its companions: one definition for both engines (loadgen's parser and the
Locust engine's custom arguments), and the settings they make."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from loadgen.inputs import bounds
from loadgen.replay import ReplaySettings
from loadgen.replay.formats import FORMATS
from loadgen.replay.prompts import DEFAULT_BLOCK_TOKENS

SPEED = bounds.real(0, 10_000, "a speed", zero_ok=False)
GAP_SCALE = bounds.real(0, 1_000, "a scale")  # 0: every call as soon as its parent answered
START = bounds.duration(positive=False, high=bounds.YEAR_S)  # into a trace of months
BLOCK_TOKENS = bounds.count(1, bounds.MAX_TOKENS, "a token count")


def add_flags(group: argparse._ArgumentGroup, *, text: bool = False) -> None:
    """The replay flags; `text` leaves their values text, as the Locust engine's custom
    arguments are (its web UI hands a form's values back as text), for `settings` to read."""

    def typed(parse: Callable[[str], Any], default: Any) -> dict[str, Any]:
        return {"default": f"{default:g}"} if text else {"type": parse, "default": default}

    group.add_argument(
        "--replay",
        metavar="FILE",
        help="send a trace's requests at their own times (instead of --rate/--concurrency): "
        "Azure LLM inference CSV, Mooncake JSONL, a requests.jsonl, the proxy's log, OTLP "
        "spans, an AIPerf multi_turn dataset, an inference-perf trace file",
    )
    group.add_argument(
        "--replay-format", choices=FORMATS, help="the trace's format (default: detected)"
    )
    group.add_argument(
        "--replay-speed",
        **typed(SPEED, 1.0),
        metavar="X",
        help="offsets divided by X: 2 sends the trace twice as fast; of an agents' trace, "
        "the sessions' starts (default 1)",
    )
    group.add_argument(
        "--gap-scale",
        **typed(GAP_SCALE, 1.0),
        metavar="X",
        help="of an agents' trace (the proxy's capture, OTLP spans, AIPerf's sessions, "
        "inference-perf's trace files): each "
        "call waits for its parent's answer, then the recorded think or tool time (an AIPerf "
        "turn's delay) times X (default 1)",
    )
    group.add_argument(
        "--replay-start",
        **typed(START, 0.0),
        metavar="D",
        help="the window opens D after the trace's first record; --duration (trace time) "
        "or --requests closes it (default: the whole trace)",
    )
    group.add_argument(
        "--replay-block-tokens",
        **typed(BLOCK_TOKENS, DEFAULT_BLOCK_TOKENS),
        metavar="N",
        help=f"tokens per Mooncake hash id (default {DEFAULT_BLOCK_TOKENS})",
    )
    group.add_argument(
        "--skip-bad-rows",
        action="store_true",
        help="skip rows that do not parse (counted in run.json and the report) instead of stopping",
    )


def settings(args: Any) -> ReplaySettings | None:
    """The flags' ReplaySettings (None: no --replay); ValueError for a bad speed or size."""
    if not args.replay:
        return None
    speed = bounds.parsed(args.replay_speed, SPEED, "--replay-speed")
    gap_scale = bounds.parsed(args.gap_scale, GAP_SCALE, "--gap-scale")
    block_tokens = bounds.parsed(args.replay_block_tokens, BLOCK_TOKENS, "--replay-block-tokens")
    start_s = bounds.parsed(args.replay_start, START, "--replay-start")
    return ReplaySettings(
        file=args.replay,
        format=args.replay_format or None,
        speed=speed,
        gap_scale=gap_scale,
        start_s=start_s,
        block_tokens=block_tokens,
        skip_bad_rows=args.skip_bad_rows,
    )
