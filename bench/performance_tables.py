"""The performance tables of docs/performance.md, generated from bench/proxy_overhead.py's JSON.

The page holds blocks like

    <!-- generated: goals bench/results/overhead-20261202T013000Z.json -->
    …
    <!-- end generated -->

and this script rewrites each block's body from the file it names (kinds: run, goals, cells,
fits, profile; `profile:TARGET:TOKENS` for one profiled cell), so no figure on the page is
typed by hand and every one carries its run count and spread. `--check` only says whether
the page is up to date (exit 1 if not).

    python bench/performance_tables.py [--check] [docs/performance.md]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "performance.md"
_BLOCK = re.compile(
    r"(<!-- generated: ([\w:+]+) (\S+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL
)


def _number(figure: str, value: float | None) -> str:
    if value is None:
        return "—"
    if figure.endswith("_vs_nginx") or figure == "slope_vs_nginx":
        return f"×{value:.2f}"
    if figure.endswith("_vs_direct"):
        return f"{value:.1%}"
    if figure.startswith("added_"):
        return f"{value:+.2f} ms"
    if figure.endswith("_ms"):
        return f"{value:.1f} ms"
    if "_us_" in figure:
        return f"{value:.0f} µs"
    if figure.endswith("_mib"):
        return f"{value:.0f} MiB"
    return f"{value:.0f}"


def spread_text(figure: str, block: dict | None) -> str:
    """`median [low, high]` (the 95% interval of the median) and `min–max`."""
    if block is None:
        return "—"
    low, high = block["ci95"]
    interval = f"[{_number(figure, low)}, {_number(figure, high)}]"
    extremes = f"{_number(figure, block['min'])} – {_number(figure, block['max'])}"
    return f"{_number(figure, block['median'])} {interval}, range {extremes}"


def run_line(result: dict) -> str:
    repeats = result["settings"]["repeat"]
    pinning = result["machine"]["pinning"]
    pinned = (
        f"load side on CPU {pinning['load'][0]}, intermediary on CPU {pinning['intermediary'][0]}"
        if pinning["load"]
        else "not pinned"
    )
    dirty = " (with uncommitted changes)" if result["dirty"] else ""
    return (
        f"`{result['command']}` at commit `{result['commit']}`{dirty}, {result['date']}: "
        f"{repeats} interleaved repeats of every cell, {result['settings']['duration']:g} s "
        f"measured per cell after {result['settings']['warmup']:g} s warm-up, "
        f"{result['machine']['cpus']} CPUs shared with other work, {pinned}.\n"
    )


def goals(result: dict) -> str:
    lines = [
        "| goal | median | 95% interval of the median | range | runs | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for goal in result["goals"]:
        figure = goal["figure"]
        if goal["verdict"] is None:
            lines.append(f"| {goal['goal']} | — | — | — | 0 | not measured |")
            continue
        low, high = goal["ci95"]
        lines.append(
            f"| {goal['goal']} | {_number(figure, goal['median'])} | "
            f"[{_number(figure, low)}, {_number(figure, high)}] | "
            f"{_number(figure, goal['min'])} – {_number(figure, goal['max'])} | {goal['n']} | "
            f"{goal['verdict']} |"
        )
    return "\n".join(lines) + "\n"


CELL_COLUMNS = (
    ("events_per_s", "events/s"),
    ("requests_per_s", "requests/s"),
    ("added_ttft_p50_ms", "+TTFT p50"),
    ("added_ttft_p99_ms", "+TTFT p99"),
    ("added_inter_event_p99_ms", "+inter-event p99"),
    ("cpu_us_per_event", "CPU/event"),
    ("cpu_us_per_event_vs_nginx", "÷ nginx"),
    ("cpu_us_per_request", "CPU/request"),
    ("cpu_us_per_request_vs_nginx", "÷ nginx"),
    ("rss_mib", "RSS"),
)


def cells(result: dict) -> str:
    """Every cell: median and range over the repeats (the interval is in the JSON)."""
    head = "| streams | tokens | target | runs | " + " | ".join(t for _, t in CELL_COLUMNS) + " |"
    lines = [head, "|" + "---|" * (4 + len(CELL_COLUMNS))]
    for cell in result["summary"]["cells"]:
        runs = (cell["events_per_s"] or {}).get("n", 0)
        values = []
        for key, _ in CELL_COLUMNS:
            block = cell[key]
            if block is None:
                values.append("—")
            else:
                values.append(
                    f"{_number(key, block['median'])} "
                    f"({_number(key, block['min'])} – {_number(key, block['max'])})"
                )
        tokens = f"{cell['tokens']}" + ("" if cell["stream"] else " (JSON)")
        lines.append(
            f"| {cell['streams']} | {tokens} | {cell['target']} | {runs} | "
            + " | ".join(values)
            + " |"
        )
    return "\n".join(lines) + "\n"


def fits(result: dict) -> str:
    lines = [
        "| streams | target | per request (intercept) | per event (slope) | slope ÷ nginx |",
        "|---|---|---|---|---|",
    ]
    for fit in result["summary"]["fits"]:
        lines.append(
            f"| {fit['streams']} | {fit['target']} | "
            f"{spread_text('intercept_us_per_request', fit['intercept_us_per_request'])} | "
            f"{spread_text('slope_us_per_event', fit['slope_us_per_event'])} | "
            f"{spread_text('slope_vs_nginx', fit['slope_vs_nginx'])} |"
        )
    return "\n".join(lines) + "\n"


def profile(result: dict, target: str | None = None, tokens: str | None = None) -> str:
    """Per profiled cell (or the one of `target` and `tokens`): CPU by layer per event, and
    the per-request parts per request."""
    out = []
    for p in result["profiles"]:
        if target is not None and (p["target"], str(p["tokens"])) != (target, tokens):
            continue
        total = sum(p["layers"].values()) or 1
        per_event, per_request = p["cpu_us_per_event"], p["cpu_us_per_request"]
        out.append(
            f"{p['target']} × {p['streams']} streams × {p['tokens']} tokens (one py-spy pass, "
            f"{total} samples; {_number('cpu_us_per_request', per_request)} per request):\n"
        )
        out.append("| layer (innermost frame) | share | µs/event | µs/request |")
        out.append("|---|---|---|---|")
        for layer, n in sorted(p["layers"].items(), key=lambda item: -item[1]):
            share = n / total
            event = f"{share * per_event:.0f}" if per_event else "—"
            out.append(f"| {layer} | {share:.0%} | {event} | {share * per_request:.0f} |")
        out.append("")
        out.append("| per-request part (inclusive) | share | µs/request |")
        out.append("|---|---|---|")
        parts_total = p["parts"]["total"] or 1
        for part, n in p["parts"].items():
            if part != "total":
                share = n / parts_total
                out.append(f"| {part} | {share:.0%} | {share * per_request:.0f} |")
        out.append("")
    return "\n".join(out)


KINDS: dict[str, Callable[..., str]] = {
    "run": run_line,
    "goals": goals,
    "cells": cells,
    "fits": fits,
    "profile": profile,
}


def everything(result: dict) -> str:
    """All tables of one run, for the terminal."""
    return "\n".join(render(result) for render in KINDS.values())


def regenerate(text: str, root: Path = REPO) -> str:
    def block(match: re.Match[str]) -> str:
        opening, selector, source, _, closing = match.groups()
        kind, *selection = selector.split(":")  # e.g. profile:proxy:64
        result = orjson.loads((root / source).read_bytes())
        return opening + KINDS[kind](result, *selection) + closing

    return _BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("doc", nargs="?", type=Path, default=DOC)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    fresh = regenerate(text)
    if args.check:
        if fresh != text:
            print(f"{args.doc} is not what {Path(__file__).name} makes of its JSON files")
            return 1
        return 0
    args.doc.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
