"""`python -m loadgen.sim fit SOURCE... --preset BASE --out FITTED.toml`: a preset fitted to
a capture of the deployment (the proxy's request log or a loadgen run directory), with
fit.json beside it and the held-out error printed.

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

from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import capture, verdict
from loadgen.sim.twin.fit import with_terms
from loadgen.sim.wire import vllm_args

DEFAULT_HOLDOUT = 0.3


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
        help="the proxy's request log (JSON lines) or a loadgen run directory",
    )
    base = p.add_mutually_exclusive_group(required=True)
    base.add_argument("--preset", help="the bundled preset to start from (the model and GPUs)")
    base.add_argument("--preset-file", help="a preset TOML file to start from")
    p.add_argument("--out", required=True, metavar="FITTED.toml", help="the fitted preset")
    p.add_argument(
        "--virtual-args",
        default="",
        metavar="FLAGS",
        help="the deployment's vLLM engine flags, e.g. \"--max-num-seqs 128\"",
    )
    p.add_argument(
        "--holdout",
        type=float,
        default=DEFAULT_HOLDOUT,
        metavar="SHARE",
        help=f"the last share of requests kept out of the fit and predicted "
        f"(default {DEFAULT_HOLDOUT})",
    )
    p.add_argument("--model", help="fit the requests of this model only (a log of several)")
    p.add_argument(
        "--replicas", type=int, default=1, metavar="N", help="replicas behind the capture"
    )
    return p


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    if not 0 < args.holdout < 0.9:
        _fail(f"--holdout {args.holdout}: a share in (0, 0.9)")
    if args.replicas < 1:
        _fail(f"--replicas {args.replicas}: at least 1")
    if not Path(args.out).parent.is_dir():
        _fail(f"--out {args.out}: no such directory")
    base = _base(args)
    try:
        captured = capture.read(args.sources, args.model)
    except capture.CaptureError as exc:
        _fail(str(exc))
    too_long = [
        i
        for i, r in enumerate(captured.requests)
        if r.prompt_tokens + r.output_tokens > base.max_model_len
    ]
    if too_long:
        r = captured.requests[too_long[0]]
        _fail(
            f"{args.sources[0]}: {len(too_long)} requests are longer than the model's context "
            f"({r.prompt_tokens} + {r.output_tokens} > {base.max_model_len}): "
            "give the deployment's --max-model-len in --virtual-args"
        )
    report = verdict.calibrate(base, captured, args.holdout, args.replicas)
    fitted = replace(with_terms(base, report.values), fit=_held_out(report))
    out = Path(args.out)
    summary = _summary(args, base, captured, report)
    out.write_text(presets.dump(fitted))
    (out.parent / "fit.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(_printed(summary, out))


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
        flags = vllm_args.parse_text(args.virtual_args)
        loaded = presets.load_file(args.preset_file) if args.preset_file else None
        preset, _warnings = vllm_args.apply(loaded or presets.load(args.preset), flags)
        if preset.engine.speculation is not None:
            raise ValueError(
                "--speculative-config: fit a capture of the engine without it, then give it "
                "as a what-if"
            )
    except (ValueError, OSError) as exc:
        _fail(f"{args.preset_file or args.preset}: {exc}")
    return preset


def _summary(
    args: argparse.Namespace, base: Preset, captured: capture.Capture, report: verdict.Report
) -> dict[str, Any]:
    n = len(captured.requests)
    held = max(1, round(n * args.holdout))
    return {
        "base": args.preset_file or args.preset,
        "virtual_args": args.virtual_args,
        "sources": captured.sources,
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
        "frontend": report.frontend,
        "held_out": report.held_out,
        "held_out_server": report.held_out_server,
        "held_out_error": report.held_out_error(),
        "slices": report.slices,
        "replays": report.replays,
        "ceilings": {"mbu": base.perf.efficiency.mbu, "mfu": base.perf.efficiency.mfu},
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
    lines.append("held-out prediction error (the twin against the capture):")
    width = 17 if summary["held_out_server"] else 10
    for who, key in (("", "held_out"), ("server ", "held_out_server")):
        for figure, row in summary[key].items():
            name = who + figure.replace("_", " ").upper()
            lines.append(
                f"  {name:<{width}} measured {row['measured'] * 1e3:,.1f} ms, "
                f"predicted {row['predicted'] * 1e3:,.1f} ms ({row['error']:+.1%})"
            )
    return "\n".join(lines)


def _fail(message: str) -> NoReturn:
    print(f"loadgen.sim fit: {message}", file=sys.stderr)
    raise SystemExit(2)
