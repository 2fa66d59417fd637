"""How much faster than real time the twin runs (loadgen/sim/twin/deployment.py, the virtual clock).

    .venv/bin/python bench/twin_speed.py [--repeat 3]

The workload is an hour shaped like Azure's LLM inference conversation trace (about 19,000
requests; examples/traces/azure_like.py: lognormal prompts near 1,020 tokens and outputs near
129, bursty arrivals under a swelling rate), on the llama-70b-bf16-tp4-a100 preset. Each cell
runs on one core and is timed in CPU seconds (process_time); the speed-up is the span of
virtual time the run covered over that CPU time, so it does not drift with the machine's
clock (a saturated replica runs past the trace's end: the speed-up still counts the trace's
span only). Cells run interleaved, --repeat times, and each figure is the median over repeats.

Cells: the hour at its own speed (one replica saturates: the batch stays near max-num-seqs)
and on four replicas; the hour at a quarter of its speed (four hours, a replica far from its
limit) and at a sixteenth (two or three sequences a step, as each of many replicas sees
in a plan's check of a large count); windows of 15 and 30 minutes (cost with requests); max-num-seqs
32 and 64 (cost with batch size). Beside each, the CPU per sequence-step (a sequence's
share of one engine step, summed over steps: about the tokens generated), which is what the
cost grows with where batches are large.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import time
from pathlib import Path

from loadgen.sim import twin
from loadgen.sim.model import presets

PRESET = "llama-70b-bf16-tp4-a100"
RATE = 4.1  # azure_like's rate at the trough that gives ~19,300 requests in the hour


def azure_like(minutes: float, speed: float) -> list[twin.Request]:
    path = Path(__file__).parent.parent / "examples" / "traces" / "azure_like.py"
    spec = importlib.util.spec_from_file_location("azure_like", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    limit = presets.load(PRESET).max_model_len
    return [
        twin.Request(t / speed, min(prompt, limit - output), output)
        for t, prompt, output in module.rows(minutes, RATE, 2023)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = presets.load(PRESET)

    def seqs(n: int) -> presets.Preset:
        return dataclasses.replace(base, engine=dataclasses.replace(base.engine, max_num_seqs=n))

    hour = azure_like(60, 1.0)
    cells = {
        "hour, 1×, 1 replica": (base, hour, 1, 3600.0),
        "hour, 1×, 4 replicas": (base, hour, 4, 3600.0),
        "hour, 0.25×, 1 replica": (base, azure_like(60, 0.25), 1, 14400.0),
        "hour, 1/16×, 1 replica": (base, azure_like(60, 1 / 16), 1, 57600.0),
        "15 min, 1×, 1 replica": (base, azure_like(15, 1.0), 1, 900.0),
        "30 min, 1×, 1 replica": (base, azure_like(30, 1.0), 1, 1800.0),
        "hour, 1×, max-num-seqs 32": (seqs(32), hour, 1, 3600.0),
        "hour, 1×, max-num-seqs 64": (seqs(64), hour, 1, 3600.0),
    }
    cpu: dict[str, list[float]] = {name: [] for name in cells}
    shape: dict[str, twin.Result] = {}
    for _ in range(args.repeat):
        for name, (preset, requests, replicas, _span) in cells.items():
            start = time.process_time()
            shape[name] = twin.run(preset, requests, replicas)
            cpu[name].append(time.process_time() - start)
    print(f"preset {PRESET}, {len(hour):,} requests in the hour, {args.repeat} repeats")
    print(
        f"{'cell':<28} {'requests':>8} {'CPU s':>7} {'× real':>7} {'steps':>8} "
        f"{'seq-steps':>10} {'batch':>6} {'µs/seq-step':>11}"
    )
    for name, (_p, requests, _r, span) in cells.items():
        result, seconds = shape[name], statistics.median(cpu[name])
        steps = result.steps
        print(
            f"{name:<28} {len(requests):>8,} {seconds:>7.2f} {span / seconds:>7.0f} "
            f"{steps.count:>8,} {steps.sequence_steps:>10,} "
            f"{steps.sequence_steps / steps.count:>6.1f} "
            f"{seconds / steps.sequence_steps * 1e6:>11.2f}"
        )


if __name__ == "__main__":
    main()
