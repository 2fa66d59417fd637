"""A load run from its RunConfig: the inputs read, the load driven, the results written.

`main` is what `python -m loadgen` does once its flags are a RunConfig (a worker process
does the same with its share): `run` starts the embedded stack when asked for, `measure`
makes one run directory at config.out, in this process or over --workers processes, with
the driver its targets call for (drivers/: live servers, or the simulator's twin). A caller
that runs several runs against one stack (say, probes of a search) starts it once, takes
`on_stack`, and calls `measure` with a `dataclasses.replace` per run.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import replace
from typing import Any

from loadgen import drivers, replay
from loadgen.analysis.summary import summarize_run
from loadgen.engine.dataset import load_dataset
from loadgen.reports import comparison
from loadgen.reports import run as report
from loadgen.runs import rundir
from loadgen.runs.config import RunConfig
from loadgen.shards import supervisor
from loadgen.stack import embedded


def main(config: RunConfig) -> int:
    """Run, print the console table; the exit code (0, 2 for bad input, 130 interrupted)."""
    try:
        summary = run(config)
    except KeyboardInterrupt:
        print("\nloadgen: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    print(report.console_table(summary))
    print(f"results: {config.out}/ (summary.json, requests.jsonl, report.md, report.html)")
    if summary["interrupted"]:
        print("loadgen: interrupted: partial results, marked invalid", file=sys.stderr)
        return 130
    return 0


def run(config: RunConfig) -> dict[str, Any]:
    """The whole run, the embedded stack started first (and stopped last) when asked for."""
    if not config.embedded:
        return measure(config)
    with embedded.stack(config.out / "embedded") as stack:
        return measure(on_stack(config, stack))


def on_stack(config: RunConfig, stack: embedded.Stack) -> RunConfig:
    """The run aimed at a started stack: proxy and direct name it, its gauges and both servers'
    metrics are sampled, and --target proxy measures direct as well."""
    specs = list(config.targets)
    if "proxy" in specs and "direct" not in specs:
        # direct first: the baseline of the report's comparison shows what the proxy costs
        specs.insert(specs.index("proxy"), "direct")
    return replace(
        config,
        embedded=False,
        targets=tuple(specs),
        overrides={"proxy": stack.proxy, "direct": stack.direct},
        gpu_metrics=config.gpu_metrics or (stack.metrics,),
        server_metrics=config.server_metrics or (stack.metrics, stack.proxy_metrics),
    )


def measure(config: RunConfig, pngs: bool = True) -> dict[str, Any]:
    """One run directory at config.out (data, summary, report, its PNG charts unless not
    `pngs`); returns the summary."""
    if config.prompt_seed is None:  # fresh prompts for every run; its workers share them
        config = replace(config, prompt_seed=secrets.randbits(63))
    # a bad trace stops the run before any load; the window read is the one the run replays
    trace = None
    if config.replay is not None:
        trace = replay.load(config.replay, config.duration_s, config.requests)
    dataset = load_dataset(config.dataset) if config.dataset else None  # so does a bad dataset
    drive = drivers.driver_for(config)  # and what the targets' driver cannot do
    if config.workers > 1:
        return supervisor.run_workers(config)  # each worker drives its share; then the merge
    data = drive(config, trace, dataset)
    if not data.phases:
        raise KeyboardInterrupt  # stopped before any load was sent: nothing to write
    summary = summarize_run(data)
    if answer := comparison.proxy_cost(data, summary):
        summary["proxy_cost"] = answer
    rundir.write(config.out, data, summary)
    report.write(config.out, data, summary, comparison.of_run(data, summary), pngs)
    return summary
