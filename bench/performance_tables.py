"""The performance tables of docs/performance.md, generated from bench/proxy_overhead.py's and
bench/ceiling.py's JSON.

The page holds blocks like

    <!-- generated: goals bench/results/overhead-20261202T013000Z.json -->
    …
    <!-- end generated -->

and this script rewrites each block's body from the file it names (kinds: run, goals, cells,
fits, profile, and ceiling, knee for bench/ceiling.py's; `profile:TARGET:TOKENS` for one
profiled cell), so no figure on the page is
typed by hand and every one carries its run count and spread. `--check` only says whether
the page is up to date (exit 1 if not).

    python bench/performance_tables.py [--check] [docs/performance.md]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "performance.md"
_BLOCK = re.compile(
    r"(<!-- generated: ([\w:+-]+) (\S+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL
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
    # runs before the hot path was compiled have no such key: their proxy ran pure
    built = f" The hot path of `proxy` ran {result.get('hot_path', 'pure')}" + (
        ", of `proxy-pure` pure."
        if "proxy-pure" in result["settings"]["targets"]
        else "."
    )
    return (
        f"`{result['command']}` at commit `{result['commit']}`{dirty}, {result['date']}: "
        f"{repeats} interleaved repeats of every cell, {result['settings']['duration']:g} s "
        f"measured per cell after {result['settings']['warmup']:g} s warm-up, "
        f"{result['machine']['cpus']} CPUs shared with other work, {pinned}.{built}\n"
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
            request = f"{share * per_request:.0f}" if per_request else "—"  # none completed
            out.append(f"| {layer} | {share:.0%} | {event} | {request} |")
        out.append("")
        out.append("| per-request part (inclusive) | share | µs/request |")
        out.append("|---|---|---|")
        parts_total = p["parts"]["total"] or 1
        for part, n in p["parts"].items():
            if part != "total":
                share = n / parts_total
                request = f"{share * per_request:.0f}" if per_request else "—"
                out.append(f"| {part} | {share:.0%} | {request} |")
        out.append("")
    return "\n".join(out)


def _median_range(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    middle = fmt.format(statistics.median(values))
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{middle} ({low} – {high})"


def ceiling(result: dict) -> str:
    """bench/ceiling.py's ceiling cells: median (range) over the repeats; the ratios are
    taken within one repeat and cell, then their median."""
    rows = [r for r in result["rows"] if r["part"] == "ceiling"]
    by = {(r["repeat"], r["streams"], r["tokens"], r["target"]): r for r in rows}
    lines = [
        "| streams | tokens | target | runs | events/s | events per CPU-second | "
        "÷ nginx (1 worker) | ÷ one worker | intermediary cores | load-side cores | "
        "busiest worker's share |",
        "|" + "---|" * 11,
    ]
    shapes = sorted({(r["streams"], r["tokens"]) for r in rows})
    targets = list(dict.fromkeys(r["target"] for r in rows))
    for streams, tokens in shapes:
        for target in targets:
            shape = (streams, tokens, target)
            mine = [r for r in rows if (r["streams"], r["tokens"], r["target"]) == shape]
            per_cpu = [r["events_per_cpu_s"] for r in mine if r["events_per_cpu_s"]]
            vs_nginx, vs_one = [], []
            for r in mine:
                nginx = by.get((r["repeat"], streams, tokens, "nginx"))
                one = by.get((r["repeat"], streams, tokens, target.split("×")[0]))
                if nginx and nginx["events_per_cpu_s"] and r["events_per_cpu_s"]:
                    vs_nginx.append(r["events_per_cpu_s"] / nginx["events_per_cpu_s"])
                if "×" in target and one and one["events_per_cpu_s"] and r["events_per_cpu_s"]:
                    vs_one.append(r["events_per_cpu_s"] / one["events_per_cpu_s"])
            shares = [max(r["worker_cpu_shares"]) for r in mine if "worker_cpu_shares" in r]
            lines.append(
                f"| {streams} | {tokens} | {target} | {len(mine)} | "
                f"{_median_range([r['events_per_s'] for r in mine], '{:,.0f}')} | "
                f"{_median_range(per_cpu, '{:,.0f}')} | {_median_range(vs_nginx, '{:.2f}')} | "
                f"{_median_range(vs_one, '{:.2f}')} | "
                f"{_median_range([r['intermediary_cores'] for r in mine], '{:.2f}')} | "
                f"{_median_range([r['load_cores'] for r in mine], '{:.2f}')} | "
                f"{_median_range(shares, '{:.0%}')} |"
            )
    return "\n".join(lines) + "\n"


KNEE_COLUMNS = (
    ("offered_events_per_s", "offered events/s", "{:,.0f}"),
    ("events_per_s", "delivered events/s", "{:,.0f}"),
    ("added_ttft_p50_ms", "+TTFT p50 (ms)", "{:+.2f}"),
    ("added_ttft_p99_ms", "+TTFT p99 (ms)", "{:+.2f}"),
    ("lag_p50_ms", "lag p50 (ms)", "{:.2f}"),
    ("lag_p99_ms", "lag p99 (ms)", "{:.2f}"),
    ("proxy_cores", "proxy cores", "{:.2f}"),
    ("load_cores", "load-side cores", "{:.2f}"),
)


def knee(result: dict) -> str:
    """bench/ceiling.py's knee: per offered level, median (range) over the repeats."""
    rows = [r for r in result["rows"] if r["part"] == "knee"]
    head = "| share of one worker's ceiling | streams | runs | "
    lines = [
        head + " | ".join(t for _, t, _ in KNEE_COLUMNS) + " |",
        "|" + "---|" * (3 + len(KNEE_COLUMNS)),
    ]
    for level in sorted({r["level"] for r in rows}):
        mine = [r for r in rows if r["level"] == level]
        values = [
            _median_range([r[key] for r in mine if r[key] is not None], fmt)
            for key, _, fmt in KNEE_COLUMNS
        ]
        first = f"| {level:.0%} | {mine[0]['streams']} | {len(mine)} | "
        lines.append(first + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


OVERHEAD_KINDS: dict[str, Callable[..., str]] = {
    "run": run_line,
    "goals": goals,
    "cells": cells,
    "fits": fits,
    "profile": profile,
}
KINDS: dict[str, Callable[..., str]] = {**OVERHEAD_KINDS, "ceiling": ceiling, "knee": knee}


def everything(result: dict) -> str:
    """All tables of one proxy_overhead.py run, for the terminal."""
    return "\n".join(render(result) for render in OVERHEAD_KINDS.values())


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
