"""`python -m loadgen merge RUN_DIR … --out DIR`: shards of one run into one exact result.

Shards (processes of --workers, or the pods of an Indexed Job running --shard i/N) each write
a full run directory. Merging concatenates their raw records and samples and recomputes every
statistic from them, so a merged P99 is the P99 of all requests, never an average of P99s;
a target's active time is the union of all shards' blocks.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from loadgen.analysis.records import RunData
from loadgen.analysis.summary import summarize_run
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.runs import rundir


def combine(shards: Sequence[RunData]) -> RunData:
    if not shards:
        raise ValueError("nothing to merge")
    first = shards[0]
    merged = RunData(settings=first.settings, meta=dict(first.meta))
    for shard in shards:
        merged.records.extend(shard.records)
        merged.phases.extend(shard.phases)
        merged.loop_lag.extend(shard.loop_lag)
        merged.gpu.extend(shard.gpu)
        merged.server.extend(shard.server)  # only shard 0 samples servers
    merged.records.sort(key=lambda r: r.intended_at)
    merged.loop_lag.sort()
    merged.gpu.sort(key=lambda s: s.at)
    merged.meta["shards"] = [s.meta.get("shard") for s in shards]
    return merged


def merge_dirs(
    paths: Sequence[str | Path], out: str | Path, command: str | None = None
) -> tuple[RunData, dict]:
    """Merge shard directories into `out`; `command` (what was run) defaults to shard 0's."""
    data = combine([rundir.read(p) for p in paths])
    if command is not None:
        data.meta["command"] = command
    summary = summarize_run(data)
    out = rundir.write(out, data, summary)
    report.write(out, data, summary, comparison.of_run(data, summary))
    return data, summary


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen merge", description="Merge shard run directories exactly."
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args(argv)
    _, summary = merge_dirs(args.runs, args.out)
    print(report.console_table(summary))
    print(f"merged {len(args.runs)} shards into {args.out}")
    return 0
