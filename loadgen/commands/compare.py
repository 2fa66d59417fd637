"""`python -m loadgen compare RUN RUN …`: side by side, relative differences, plain verdicts.

The comparison itself is reports/comparison.py; this reads the run directories and writes
its outputs.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from loadgen.analysis import stats
from loadgen.analysis.slo import parse_slos
from loadgen.reports.comparison import Margin, Series, judged_percentile, render, series_of
from loadgen.reports.html import compare as html_compare
from loadgen.runs import rundir


def load_series(paths: Sequence[str | Path]) -> list[Series]:
    """Every target of every run; labelled by run directory too where names repeat."""
    loaded = [(Path(p), rundir.read(p), rundir.read_summary(p)) for p in paths]
    names = Counter(name for _, _, s in loaded for name in s["targets"])
    series = []
    for path, data, summary in loaded:
        repeated = any(names[name] > 1 for name in summary["targets"])
        series += series_of(data, summary, f"{path.name}/" if repeated else "")
    return series


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen compare",
        description="Compare run directories: the first run's first target is the baseline.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC=DURATION[@pNN]",
        help="override the runs' SLOs (ttft, tpot, e2e), e.g. tpot=45ms or ttft=800ms@p90",
    )
    parser.add_argument(
        "--slo-percentile",
        choices=list(stats.PERCENTILES),
        help="judge SLOs that name no @pNN at this percentile (default p99, or the highest "
        "all runs support)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE.md",
        help="also write the comparison here, and as a page to FILE.html beside it",
    )
    parser.add_argument(
        "--margin",
        type=Margin.parse,
        default=Margin(),
        metavar="R%,Dms,Ppt",
        help="list only differences beyond this margin of practical equivalence: a latency "
        "beyond R%% and D, a price or J/token beyond R%%, an accuracy not within P points "
        f"(default {Margin().relative * 100:g}%%,{Margin().absolute_s * 1e3:g}ms,"
        f"{Margin().points:g}pt)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    series = load_series(args.runs)
    if len(series) < 2:
        parser.error("need at least two targets across the given runs")
    slos = parse_slos(args.slo) if args.slo else series[0].slo
    pct = args.slo_percentile or judged_percentile(series)
    text = render(series, slos, pct, np.random.default_rng(args.seed), margin=args.margin)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        out.write_text(text)
        out.with_suffix(".html").write_text(html_compare.render(series, text, args.runs))
    return 0
