"""`python -m loadgen report DIR [...]`: report.md, report.html and the PNGs again, from what
a run directory (or a capacity search's) keeps, so a report follows an upgrade of loadgen.

A run directory's summary.json is recomputed from requests.jsonl and run.json as well (the
summary is a function of those alone), so the three agree and figures added since the run
appear. A capacity directory is redrawn from capacity.json, and each probe's run directory
in it is rebuilt too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from loadgen.analysis.summary import summarize_run
from loadgen.reports import capacity as capacity_report
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.runs import rundir

CAPACITY = "capacity.json"


def run_dir(path: Path) -> Path:
    data = rundir.read(path)
    summary = summarize_run(data)
    (path / rundir.SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return report.write(path, data, summary, comparison.of_run(data, summary))


def capacity_dir(path: Path) -> list[Path]:
    result = capacity_report.upgrade(json.loads((path / CAPACITY).read_text()))
    rebuilt = [run_dir(p) for p in sorted(path.glob("probe-*")) if (p / rundir.RUN).exists()]
    capacity_report.write(path, result)
    return [*rebuilt, path / "report.md"]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen report",
        description="Rebuild report.md, report.html and the plots of run or capacity "
        "directories from their saved results.",
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", type=Path)
    args = parser.parse_args(argv)
    failed = 0
    for path in args.dirs:
        try:
            written = capacity_dir(path) if (path / CAPACITY).exists() else [run_dir(path)]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"loadgen report: {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed += 1
            continue
        for p in written:
            print(f"{p.parent}/: report.md, report.html")
    return 1 if failed else 0
