"""`python -m loadgen sessions CAPTURE`: the agents' sessions in a proxy capture, one row
each (analysis/sessions.py), and TTFT by turn; --json for the figures as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from loadgen.analysis.sessions import from_lines, per_session, ttft_by_turn
from loadgen.inputs import jsonl
from loadgen.replay.formats import ACCESS_LOGGER


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen sessions",
        description="Per session of a proxy capture: calls, time, model vs tools, prefix hits.",
    )
    parser.add_argument("capture", metavar="CAPTURE", help="the proxy's JSON log lines")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    try:
        text = Path(args.capture).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"loadgen sessions: {args.capture}: {exc}", file=sys.stderr)
        return 2
    calls = from_lines(
        item
        for _, item in jsonl.objects(text)
        if isinstance(item, dict) and item.get("logger") == ACCESS_LOGGER
    )
    sessions, turns = per_session(calls), ttft_by_turn(calls)
    if not sessions:
        print(f"loadgen sessions: {args.capture}: no chat call with a session", file=sys.stderr)
        return 2
    if args.json:
        rows = [s.row() for s in sessions]
        print(json.dumps({"sessions": rows, "ttft_by_turn": turns}, indent=2))
        return 0
    print("| session | calls | turns | span s | model s | tools s | model share | prefix hits |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sessions:
        hits = "—" if s.prefix_hit_share is None else f"{s.prefix_hit_share:.0%}"
        print(
            f"| {s.session} | {s.calls} | {s.turns} | {s.span_s:.2f} | {s.model_s:.2f} | "
            f"{s.tools_s:.2f} | {s.model_share:.0%} | {hits} |"
        )
    print("\n| turn | calls | TTFT P50 s | TTFT P90 s |\n|---|---|---|---|")
    for turn, figures in turns.items():
        print(f"| {turn} | {figures['calls']} | {figures['p50_s']:.3f} | {figures['p90_s']:.3f} |")
    return 0
