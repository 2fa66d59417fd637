"""`python -m loadgen.sim fit SOURCE... --preset BASE --out FITTED.toml`: a preset fitted to
a capture of the deployment (the proxy's request log, a loadgen run directory or another
benchmark tool's file: twin/sources/), with fit.json beside it and the held-out error
printed, in all and per source.

Only the efficiency terms are fitted; the model, GPU count and engine flags are the base
preset's with --virtual-args applied (vLLM's flags, as `python -m loadgen.sim` takes them).
Input a fit cannot use is a one-line error naming the file, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from loadgen.sim import fit_cost, fit_out
from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import budget, capture, verdict
from loadgen.sim.twin.fit import with_terms
from loadgen.sim.vllm_flags.engine import apply_flags, from_catalogue
from loadgen.sim.vllm_flags.table import add_model_arguments, parse_text

DEFAULT_HOLDOUT = 0.3
AT_CEILING = 3  # the exit status of a fit that wrote its files with a term at its ceiling


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.sim fit",
        description="Fit a preset's efficiency terms to a capture of a deployment, replayed "
        "on the simulator's virtual clock; report each term's 95% interval and the error "
        "predicting the capture's last requests, kept out of the fit.",
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="the proxy's request log (JSON lines), a loadgen run directory, AIPerf's "
        "profile_export.jsonl, GuideLLM's benchmarks.json, vLLM's bench serve JSON (saved "
        "with --save-detailed) or inference-perf's per-request report; the format is told "
        "from the content",
    )
    base = p.add_mutually_exclusive_group()
    base.add_argument("--preset", help="the bundled preset to start from (the model and GPUs)")
    base.add_argument("--preset-file", help="a preset TOML file to start from")
    add_model_arguments(p)
    p.add_argument("--out", required=True, metavar="FITTED.toml", help="the fitted preset")
    p.add_argument(
        "--virtual-args",
        default="",
        metavar="FLAGS",
        help='the deployment\'s vLLM engine flags, e.g. "--max-num-seqs 128"',
    )
    p.add_argument(
        "--holdout",
        type=float,
        default=DEFAULT_HOLDOUT,
        metavar="SHARE",
        help=f"the last share of requests kept out of the fit and predicted, at least "
        f"{verdict.MIN_HELD_OUT} of them (default {DEFAULT_HOLDOUT})",
    )
    p.add_argument("--model", help="fit the requests of this model only (a log of several)")
    p.add_argument(
        "--replicas", type=int, default=1, metavar="N", help="replicas behind the capture"
    )
    p.add_argument(
        "--time-budget",
        default=fit_cost.DEFAULT_BUDGET,
        metavar="DURATION",
        help="refuse a fit estimated (from its first replay) to take longer "
        f"(default {fit_cost.DEFAULT_BUDGET})",
    )
    return p


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    if not 0 < args.holdout < 0.9:
        _fail(f"--holdout {args.holdout}: a share in (0, 0.9)")
    if args.replicas < 1:
        _fail(f"--replicas {args.replicas}: at least 1")
    base = _base(args)
    available = budget.available_bytes()
    if fault := budget.replicas_fault("--replicas", base, args.replicas, available):
        _fail(fault)
    try:
        out, summary_path = fit_out.prepare(args.out, args.sources)
    except ValueError as exc:
        _fail(str(exc))
    try:
        time_budget = fit_cost.budget_s(args.time_budget)
        fit_cost.check_sources(args.sources)
        captured = capture.read(args.sources, args.model)
    except ValueError as exc:  # CaptureError among them
        _fail(str(exc))
    sizes = [sum(1 for r in captured.requests if r.source == k) for k in range(len(args.sources))]
    n, least = min(sizes), verdict.MIN_HELD_OUT  # each source is held out and judged alone
    if round(n * args.holdout) < least:
        _fail(
            f"--holdout {args.holdout:g}: keeps {round(n * args.holdout)} of the capture's {n:,} "
            f"requests out; judging the twin's P90 needs at least {least}: give at least "
            f"{math.ceil(least / n * 100) / 100:g}"
        )
    too_long = [
        i
        for i, r in enumerate(captured.requests)
        if r.prompt_tokens + r.output_tokens > base.max_model_len
    ]
    if too_long:
        r = captured.requests[too_long[0]]
        _fail(
            f"{args.sources[r.source]}: {len(too_long)} requests are longer than the "
            f"model's context ({r.prompt_tokens} + {r.output_tokens} > {base.max_model_len}): "
            "give the deployment's --max-model-len in --virtual-args"
        )
    meter = fit_cost.Meter(len(captured.requests), time_budget)
    try:
        report = verdict.calibrate(base, captured, args.holdout, args.replicas, meter)
    except fit_cost.TooCostly as exc:
        _fail(str(exc))
    # fitted to a measurement: the base's `uncalibrated` no longer holds
    fitted = replace(with_terms(base, report.values), fit=_held_out(report), uncalibrated="")
    summary = _summary(args, base, captured, report)
    out.write_text(presets.dump(fitted))
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(_printed(summary, out))
    if report.at_ceiling:
        for pinned in report.at_ceiling.values():
            print(f"loadgen.sim fit: warning: {pinned['warning']}", file=sys.stderr)
        raise SystemExit(AT_CEILING)


def _held_out(report: verdict.Report) -> dict[str, float] | None:
    """The preset's [fit] table: its held-out errors, carried with the file; None when
    nothing was held out to check."""
    error = report.held_out_error()
    if not math.isfinite(error):
        return None
    return {"error": error} | {key: row["error"] for key, row in report.held_out.items()}


def _base(args: argparse.Namespace) -> Preset:
    """The base preset with --virtual-args applied, as the simulator applies vLLM's flags."""
    try:
        flags = parse_text(args.virtual_args)
        for key in ("gpu", "model_config", "dtype"):
            mine, theirs = getattr(args, key), getattr(flags, key)
            if mine is not None and theirs not in (None, mine):
                flag = "--" + key.replace("_", "-")
                raise ValueError(f"{flag} {mine} and --virtual-args' {flag} {theirs}: give one")
            setattr(flags, key, mine or theirs)
        derived = from_catalogue(flags)
        named = args.preset_file or args.preset
        if (derived is None) == (named is None):
            raise ValueError("give --preset, --preset-file, or --gpu with --model-config")
        loaded = presets.load_file(args.preset_file) if args.preset_file else derived
        preset, _warnings = apply_flags(loaded or presets.load(args.preset), flags)
        if preset.engine.speculation is not None:
            raise ValueError(
                "--speculative-config: fit a capture of the engine without it, then give it "
                "as a what-if"
            )
    except (ValueError, OSError) as exc:
        named, said = args.preset_file or args.preset, str(exc)
        _fail(f"{named}: {said}" if named and not said.startswith(named) else said)
    return preset


def _summary(
    args: argparse.Namespace, base: Preset, captured: capture.Capture, report: verdict.Report
) -> dict[str, Any]:
    n = len(captured.requests)
    held = len(verdict.held_out(captured, args.holdout))
    return {
        "base": args.preset_file or args.preset or base.name,
        "virtual_args": args.virtual_args,
        "sources": [
            {
                "path": source.path,
                "format": source.format,
                "fitted": source.fitted,
                "streams": source.streams,
                "requests": source.requests,
                "failed": source.failed,
                **({"rebuilt_from": source.settings} if source.settings else {}),
            }
            | judged
            for source, judged in zip(captured.sources, report.by_source, strict=True)
        ],
        "model": captured.model,
        "replicas": args.replicas,
        "requests": {
            "replayed": n,
            "fitted": n - held,
            "held_out": held,
            "failed": captured.failed,
            "span_s": captured.requests[-1].arrival,
        },
        "terms": {
            name: {
                "value": value,
                "base": report.base[name],
                "interval_95": list(report.intervals[name]) if name in report.intervals else None,
                "fitted": name in report.intervals,
            }
            for name, value in report.values.items()
        },
        "not_identified": report.not_identified,
        "at_ceiling": report.at_ceiling,
        "frontend": report.frontend,
        "held_out": report.held_out,
        "held_out_server": report.held_out_server,
        "held_out_error": report.held_out_error(),
        "fitted_load": report.fitted_load,
        "slices": report.slices,
        "replays": report.replays,
        "ceilings": {"mbu": base.perf.hardware.mbu_ceiling, "mfu": base.perf.hardware.mfu_ceiling},
    }


def _printed(summary: dict[str, Any], out: Path) -> str:
    lines = [
        f"fitted {summary['requests']['fitted']:,} requests, predicted the last "
        f"{summary['requests']['held_out']:,}: wrote {out} and {out.parent / 'fit.json'}"
    ]
    for name, term in summary["terms"].items():
        if term["fitted"]:
            lo, hi = term["interval_95"]
            lines.append(
                f"  {name:<24} {term['value']:.4g}  95% [{lo:.4g}, {hi:.4g}]"
                f"  (base {term['base']:.4g})"
            )
    for name, why in summary["not_identified"].items():
        lines.append(f"  {name:<24} not identified: {why}")
    front = summary["frontend"]
    if front["loose"]:
        lines.append(
            f"  the front end is kept though the capture cannot pin down "
            f"{', '.join(front['loose'])}: held-out error {front['held_out_error_with']:.1%} "
            f"with it against {front['held_out_error_without']:.1%} without"
        )
    if len(summary["sources"]) > 1 or summary["sources"][0]["fitted"] != "per request":
        for source in summary["sources"]:
            error = source["held_out_error"]
            lines.append(
                f"  {source['path']}: {source['format']}, {source['fitted']}, held-out error "
                + ("none held out" if error is None else f"{error:.1%}")
            )
    for name, pinned in summary["at_ceiling"].items():
        ceiling, needed = pinned["ceiling"], pinned["needed"]
        lines.append(f"  {name:<24} at its ceiling {ceiling:g}: the capture needs {needed:.3g}")
    lines.append("prediction error (the twin against the capture), held out and fitted to:")
    width = 17 if summary["held_out_server"] else 10
    for who, key in (("", "held_out"), ("server ", "held_out_server")):
        for figure, row in summary[key].items():
            fitted = summary["fitted_load"].get(figure) if not who else None
            beside = f"; fitted load {fitted['error']:+.1%}" if fitted else ""
            name = who + figure.replace("_", " ").upper()
            lines.append(
                f"  {name:<{width}} measured {row['measured'] * 1e3:,.1f} ms, "
                f"predicted {row['predicted'] * 1e3:,.1f} ms ({row['error']:+.1%}){beside}"
            )
    return "\n".join(lines)


def _fail(message: str) -> NoReturn:
    print(f"loadgen.sim fit: {message}", file=sys.stderr)
    raise SystemExit(2)
