"""How long a predicted capacity search by speed takes (`python -m loadgen capacity --target
virtual:… --replay … --by speed`), and how its cost grows with the trace.

    .venv/bin/python bench/twin_capacity.py [--repeat 2]

The trace is the hour shaped like Azure's conversation trace that bench/twin_speed.py runs
(examples/traces/azure_like.py, about 19,300 requests), on llama-70b-bf16-tp4-a100, searched
against TTFT ≤ 2 s at P90 (the trace's long prompts keep TTFT P90 above 1.4 s even on an idle
replica). Each search is the command itself, in a child process pinned to one core; its wall
time is what a user waits, its CPU time what it costs. Beside each, in the same run, the
reference: one pass of the same window through the twin (twin.run at 1x, CPU seconds), so
"× one pass" says how many passes the whole search cost, whatever the machine's speed.
Windows of 15, 30 and 60 minutes show the growth with requests. Cells run interleaved,
--repeat times; each figure is the median over repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from twin_speed import PRESET, RATE, azure_like

from loadgen.sim import twin
from loadgen.sim.model import presets

ROOT = Path(__file__).parent.parent
SLO = "ttft=2s@p90"
MINUTES = (15, 30, 60)


def write_trace(path: Path) -> None:
    """The hour as an Azure-format CSV, the file the command replays."""
    script = ROOT / "examples" / "traces" / "azure_like.py"
    args = ["--minutes", "60", "--rate", str(RATE), "--seed", "2023"]
    with path.open("w") as f:
        subprocess.run([sys.executable, str(script), *args], stdout=f, check=True)


def one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def search(trace: Path, minutes: int, out: Path) -> tuple[float, float, dict]:
    """The command on `minutes` of the trace: (wall s, CPU s, capacity.json)."""
    argv = [
        sys.executable, "-m", "loadgen", "capacity",
        "--target", f"virtual:{PRESET}",
        "--replay", str(trace), "--skip-bad-rows", "--by", "speed",
        "--duration", f"{minutes * 60}s", "--slo", SLO, "--out", str(out),
    ]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, preexec_fn=one_core)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads((out / "capacity.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    one_core()
    preset = presets.load(PRESET)
    windows = {m: azure_like(m, 1.0) for m in MINUTES}
    rows: dict[int, dict[str, list[float]]] = {
        m: {"wall": [], "cpu": [], "pass": []} for m in MINUTES
    }
    found: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "azure_hour.csv"
        write_trace(trace)
        for r in range(args.repeat):
            for m in MINUTES:
                start = time.process_time()
                twin.run(preset, windows[m])
                rows[m]["pass"].append(time.process_time() - start)
                wall, cpu, result = search(trace, m, Path(tmp) / f"search-{m}-{r}")
                rows[m]["wall"].append(wall)
                rows[m]["cpu"].append(cpu)
                found[m] = result
    print(f"preset {PRESET}, SLO {SLO}, {args.repeat} repeats (medians), one core")
    print(
        f"{'window':<8} {'requests':>8} {'probes':>6} {'wall s':>7} {'CPU s':>7} "
        f"{'CPU s/probe':>11} {'1 pass s':>8} {'× one pass':>10}  capacity"
    )
    for m in MINUTES:
        result = found[m]
        (t,) = result["targets"].values()
        wall, cpu, one = (statistics.median(rows[m][k]) for k in ("wall", "cpu", "pass"))
        probes = len(t["probes"])
        print(
            f"{m:>4} min {len(windows[m]):>8,} {probes:>6} {wall:>7.1f} {cpu:>7.1f} "
            f"{cpu / probes:>11.1f} {one:>8.1f} {cpu / one:>10.1f}  "
            f"{t['capacity']}x [{t['bracket'][0]}, {t['bracket'][1]}]"
        )


if __name__ == "__main__":
    main()
