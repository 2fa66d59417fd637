"""How long `python -m loadgen plan` takes over a space of 20 or 200 candidates, how many of
them the bounds rule out before any run, and what that makes on a 16-core machine.

    .venv/bin/python bench/plan_speed.py [--candidates 20|200] [--minutes 60] [--jobs N]

The traffic is the hour shaped like Azure's conversation trace (examples/traces/azure_like.py,
about 19,300 requests, as bench/twin_speed.py and twin_capacity.py run it), or its first
--minutes, replayed by speed against TTFT ≤ 2 s and TPOT ≤ 50 ms at P90. The space is models
named by their config.json (tests/sim/model/configs: Qwen2.5-72B, Mixtral-8x7B) on five
catalogue GPUs × tensor parallelism 1, 2, 4, 8 × dtypes, at illustrative prices:

    20 candidates: Qwen2.5-72B × 5 GPUs × 4 TP sizes × bf16
    200 candidates: both models × 5 GPUs × 4 TP sizes × bf16, fp8, int8, awq, gptq

The plan is the command itself, in a child process on --jobs processes (default: the cores);
its wall time is what a user waits, its CPU time (its children's) what it costs. The
reference, measured in the same run before each plan: one pass of the same window through
the twin of one candidate (Qwen2.5-72B bf16 on 4×H100, twin.run at 1x, CPU seconds), so
"passes" says what the plan cost whatever the machine's speed, and one of the whole hour,
which shows a request costs about the same in both. Candidates are independent processes, so
on 16 cores the plan takes about its CPU over 16: the low figure (as pruned here); with 16
sized at once the cheapest is known later and fewer are pruned, so the high figure sizes
every candidate the bounds left, at this run's CPU per sized candidate. A shorter window's
plan is scaled to the hour by the requests its probes would replay there (by speed a probe
replays the whole window at any level; a short one's are extended to be sure of a
percentile), the same probes assumed. --repeat runs it again, interleaved with its
reference; figures are the medians; --out keeps the plans.
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
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from twin_capacity import write_trace
from twin_speed import azure_like

from loadgen.engine import virtual
from loadgen.sim import twin

ROOT = Path(__file__).parent.parent
CONFIGS = ROOT / "tests" / "sim" / "model" / "configs"
SLO = ["--slo", "ttft=2s@p90", "--slo", "tpot=50ms@p90"]
PRICES = {"a100-sxm-80gb": 1.8, "h100-sxm": 3.0, "h200": 3.8, "l40s": 1.0, "mi300x": 3.4}
SPACES = {  # candidates: (models, dtypes), each on every GPU of PRICES at TP 1, 2, 4, 8
    20: (["qwen2.5-72b"], ["bf16"]),
    200: (["qwen2.5-72b", "mixtral-8x7b"], ["bf16", "fp8", "int8", "awq", "gptq"]),
}
CORES = 16
REFERENCE = "--gpu h100 --dtype bf16 --tensor-parallel-size 4"


def plan_toml(path: Path, candidates: int) -> None:
    models, dtypes = SPACES[candidates]
    configs = ", ".join(f'{{model_config = "{CONFIGS / m}.json"}}' for m in models)
    prices = "".join(f"{gpu} = {usd}\n" for gpu, usd in PRICES.items())
    path.write_text(
        f"max_replicas = 16\n[space]\nmodels = [{configs}]\ngpus = {json.dumps([*PRICES])}\n"
        f"tensor_parallel = [1, 2, 4, 8]\ndtypes = {json.dumps(dtypes)}\n[prices]\n{prices}"
    )


def run_plan(trace: Path, toml: Path, minutes: int, jobs: int, out: Path) -> tuple[float, float]:
    """The command: (wall s, CPU s of it and its workers)."""
    argv = [
        sys.executable, "-m", "loadgen", "plan", "--candidates", str(toml),
        "--replay", str(trace), "--skip-bad-rows", "--duration", f"{minutes * 60}s", *SLO,
        "--seed", "1", "--jobs", str(jobs), "--out", str(out),
    ]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # from its tree: `-m` looks in the working directory before PYTHONPATH
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_pass(requests: list[twin.Request]) -> float:
    """CPU seconds of one pass of `requests` through the reference candidate's twin."""
    config = CONFIGS / "qwen2.5-72b.json"
    preset = virtual.preset("virtual:", f"--model-config {config} {REFERENCE}")
    start = time.process_time()
    twin.run(preset, requests)
    return time.process_time() - start


def fates(result: dict, window: int, hour: int) -> Counter[str]:
    """What became of the candidates (ruled out before any run, pruned, or sized), their
    capacity searches and probes, and the requests those probes replayed: here, and were the
    window the hour."""
    out: Counter[str] = Counter()
    dirs = []
    for c in result["candidates"]:
        if not c.get("searches"):
            out[c["status"]] += 1
            continue
        out["sized"] += 1
        out["searches"] += sum(s.get("kind") != "check" for s in c["searches"])
        out["checks"] += sum(s.get("kind") == "check" for s in c["searches"])
        out["probes"] += sum(s["probes"] for s in c["searches"])
        dirs += [s["dir"] for s in c["searches"]]
    for d in dirs:
        (t,) = json.loads((Path(d) / "capacity.json").read_text())["targets"].values()
        out["replayed"] += sum(p["requests"] for p in t["probes"])
        # by speed, a probe of the hour replays the hour at any level: more requests than a
        # short window's probe extended to be sure of a percentile
        share = (min(1.0, p["requests"] / window) for p in t["probes"])
        out["hour_replayed"] += sum(round(hour * f) for f in share)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, choices=sorted(SPACES), default=20)
    parser.add_argument("--minutes", type=int, default=60, help="of the hour, from its start")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, help="keep the plans' directories here")
    args = parser.parse_args()
    window, hour = azure_like(args.minutes, 1.0), azure_like(60, 1.0)
    rows: dict[str, list[float]] = {"wall": [], "cpu": [], "pass": [], "hour": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = (args.out or Path(tmp)).resolve()
        trace, toml = Path(tmp) / "azure_hour.csv", Path(tmp) / "plan.toml"
        write_trace(trace)
        plan_toml(toml, args.candidates)
        for r in range(args.repeat):
            rows["pass"].append(one_pass(window))
            rows["hour"].append(one_pass(hour) if args.minutes != 60 else rows["pass"][-1])
            wall, cpu = run_plan(trace, toml, args.minutes, args.jobs, out / f"plan-{r}")
            rows["wall"].append(wall)
            rows["cpu"].append(cpu)
        result = json.loads((out / f"plan-{r}" / "plan.json").read_text())
        seen = fates(result, len(window), len(hour))
    wall, cpu, one, hour_pass = (statistics.median(rows[k]) for k in rows)
    n, sized = len(result["candidates"]), max(1, seen["sized"])
    before_run = seen["does_not_fit"] + seen["cannot_meet"]
    print(
        f"{n} candidates, {args.minutes} min of the Azure-shaped hour ({len(window):,} "
        f"requests), --jobs {args.jobs} on {os.cpu_count()} cores, {args.repeat} repeat(s)"
    )
    print(
        f"ruled out before any run: {seen['does_not_fit']} do not fit, {seen['cannot_meet']} "
        f"cannot meet TPOT by the roofline; pruned by the cost bound: {seen['pruned']}; "
        f"sized: {seen['sized']} ({seen['searches']} capacity searches, {seen['checks']} "
        f"checks, {seen['probes']} probes; those kept replayed {seen['replayed']:,} requests)"
    )
    print(
        f"wall {wall:.0f} s, CPU {cpu:.0f} s: {cpu / n:.1f} CPU s per candidate, "
        f"{cpu / sized:.0f} per candidate sized; one pass of the window {one:.1f} s "
        f"({one / len(window) * 1e3:.2f} ms a request), of the hour {hour_pass:.1f} s "
        f"({hour_pass / len(hour) * 1e3:.2f} ms): the plan cost {cpu / one:.0f} passes"
    )
    # the hour's probes replay more requests; a request costs about the same (the passes)
    scale = seen["hour_replayed"] / max(1, seen["replayed"])
    low, high = cpu / CORES, cpu / sized * (n - before_run) / CORES
    print(
        f"on {CORES} cores: {low / 60:.1f}–{high / 60:.1f} min for this window (pruned as "
        f"here – every candidate the bounds left sized); the same probes on the hour replay "
        f"×{scale:.1f} the requests: {low * scale / 60:.0f}–{high * scale / 60:.0f} min"
    )


if __name__ == "__main__":
    main()
