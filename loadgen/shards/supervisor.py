"""--workers N: one run spread over N processes, then merged into one exact result.

Each worker is `python -m loadgen.commands.worker` with its share as a RunConfig on stdin: shard i
of N, its own run directory under shards/, the common --sync-dir so all start their load at
the same moment, no progress line. The parent sends no load itself; it merges the shards'
raw data (merge.py), so percentiles are over all requests.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from loadgen.engine.interrupt import STOP_SIGNALS
from loadgen.runs import rundir
from loadgen.runs.config import RunConfig
from loadgen.shards import merge
from loadgen.stack.processes import stop

WORKER = (sys.executable, "-m", "loadgen.commands.worker")


def shard_dir(out: Path, index: int) -> Path:
    return out / "shards" / f"shard-{index}"


def worker_config(config: RunConfig, index: int) -> RunConfig:
    """Worker `index`'s share of the run."""
    return replace(
        config,
        out=shard_dir(config.out, index),
        workers=1,
        shard=(index, config.workers),
        sync_dir=config.out / "shards" / "sync",
        progress=False,
    )


def start(config: RunConfig) -> subprocess.Popen:
    """A worker process for this configuration, in a session of its own."""
    process = subprocess.Popen(WORKER, stdin=subprocess.PIPE, start_new_session=True)
    assert process.stdin is not None
    with process.stdin:
        process.stdin.write(config.to_json().encode())
    return process


def run_workers(config: RunConfig) -> dict:
    """Start the workers together, wait for all, merge their run directories into config.out.

    Workers run in sessions of their own, so a Ctrl-C or SIGTERM reaches only this process,
    which passes each one on to every worker: the first ends their runs early (each writes
    what it measured, merged as usual), a second stops them at once.
    """
    children: list[subprocess.Popen] = []
    signals: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        signals.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        for index in range(config.workers):
            if signals:
                break
            children.append(start(worker_config(config, index)))
        failed = [c.args for c in children if c.wait() != 0]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for child in children:
            stop(child)
    shard_dirs = [shard_dir(config.out, i) for i in range(len(children))]
    if signals:
        shard_dirs = [d for d in shard_dirs if (d / rundir.RUN).exists()]
        if not shard_dirs:
            raise KeyboardInterrupt
    elif failed:
        raise SystemExit(f"loadgen: {len(failed)} worker(s) failed")
    _, summary = merge.merge_dirs(shard_dirs, config.out, command=config.command)
    return summary
