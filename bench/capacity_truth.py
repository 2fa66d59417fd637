"""Is `loadgen capacity`'s default answer right? Brute force against the simulator, then compare.

`truth` measures, per preset and axis, long open-loop (or closed-loop) runs at a few levels
near the knee with several arrival seeds, and writes every level's SLO percentiles, steady
verdicts and the simulator's own lateness to bench/results/capacity_truth.json. The true
capacity (`capacity.level`) is where a least-squares line through each level's binding
ratio (the SLO percentile averaged over seeds, over its limit; the binding SLO is the one
highest at the top level) crosses 1: near the knee a 30 s window's P90 scatters by more
than the step between levels, so no single level decides it. `capacity.bracket` is the
highest level meeting every SLO (open loop: in every seed steady; closed loop cannot run
away, so there the SLOs alone decide) and the next one up, and `capacity.seeds` the same
line per seed: how much the truth itself moves.

`search` runs `python -m loadgen capacity` with its defaults (only the SLOs, the workload and
the axis given) against a fresh simulator per preset and axis, and writes the answer, its
bracket, probes, elapsed time and error against the truth to bench/results/capacity_search.json.

    .venv/bin/python bench/capacity_truth.py truth --preset llama-70b-awq-tp4-a100 --by rate \\
        --levels 6.5,7,7.5,8 --seeds 2 --duration 45s --warmup 15s
    .venv/bin/python bench/capacity_truth.py search --preset llama-70b-awq-tp4-a100 --by rate

Both start the simulator (no proxy: the simulator is the target) and loadgen on this
machine at --nice (default -10), the simulator SCHED_FIFO (--realtime, the default: on a
box shared with other jobs the simulator, which runs in real time, must not be starved;
it sleeps between steps, so it does not starve the others); the simulator's lag
(loadgen_sim_schedule_lag_seconds, scraped before and after each run) says whether it kept
its schedule anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from latency_proxy.base.units import parse_duration
from loadgen.stack.processes import free_port, running

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SLOS = {"ttft": (0.8, "p90"), "tpot": (0.05, "p90")}
SLO_FLAGS = [f"--slo={m}={limit * 1e3:g}ms@{pct}" for m, (limit, pct) in SLOS.items()]
WORKLOAD = ["--endpoint", "chat", "--input-tokens", "256", "--output-tokens", "32", "--no-progress"]
METRIC = {"ttft": "ttft_s", "tpot": "tpot_s"}


def lag(metrics_url: str) -> dict[float, float]:
    """The simulator's cumulative schedule-lag histogram: bucket bound -> count."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "loadgen_sim_schedule_lag_seconds_bucket":
                out[float(s.labels["le"])] = s.value
    return out


def lag_figures(before: dict[float, float], after: dict[float, float]) -> dict[str, float]:
    """Of the tokens released during a run: the share ≤ 2 ms late, and the bound of P99."""
    delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = delta[-1][1] or 1.0
    p99 = next(le for le, n in delta if n >= 0.99 * total)
    return {"on_time_2ms": dict(delta).get(0.002, 0.0) / total, "p99_le_s": p99}


def loadgen(argv: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "loadgen", *argv], cwd=ROOT, check=True)


@contextlib.contextmanager
def simulator(preset: str, log_dir: Path, realtime: bool) -> Iterator[str]:
    """`python -m loadgen.sim --preset P` on a free port (SCHED_FIFO if asked); its URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "loadgen.sim", "--preset", preset, "--port", str(port)]
    with running(argv, url + "/health", log_dir / "sim.log") as process:
        if realtime:
            os.sched_setscheduler(process.pid, os.SCHED_FIFO, os.sched_param(1))
        yield url


def truth(args: argparse.Namespace) -> None:
    out = Path(args.out)
    levels = [float(x) for x in args.levels.split(",")]
    flag = "--rate" if args.by == "rate" else "--concurrency"
    runs, lags = [], []
    with simulator(args.preset, out, args.realtime) as sim:
        for seed in range(1, args.seeds + 1):
            run_dir = out / f"seed-{seed}"
            before = lag(sim + "/metrics")
            started = time.monotonic()
            loadgen(
                [
                    *("--target", sim, "--server-metrics", sim + "/metrics"),
                    *(flag, args.levels, "--duration", args.duration, "--warmup", args.warmup),
                    *("--seed", str(seed), *SLO_FLAGS, *WORKLOAD, "--out", str(run_dir)),
                ]
            )
            summary = json.loads((run_dir / "summary.json").read_text())
            for point in summary["sweep"]["points"]:
                (t,) = point["targets"].values()
                runs.append(
                    {
                        "seed": seed,
                        "level": point["level"],
                        "steady": t["steady_state"]["steady"],
                        "requests": t["requests"]["ok"],
                        **{
                            m: {
                                "value": t["metrics"][METRIC[m]][pct],
                                "ci95": t["metrics"][METRIC[m]]["ci95"][pct],
                            }
                            for m, (_, pct) in SLOS.items()
                        },
                    }
                )
            wall = time.monotonic() - started
            print(f"seed {seed}: {len(levels)} levels in {wall:.0f} s", file=sys.stderr)
            figures = lag_figures(before, lag(sim + "/metrics"))
            lags.append({"seed": seed, "wall_s": round(wall), **figures})
    table = _table(levels, runs, open_loop=args.by == "rate")
    result = {
        "preset": args.preset,
        "by": args.by,
        "slo": {m: {"limit_s": lim, "percentile": pct} for m, (lim, pct) in SLOS.items()},
        "workload": "chat, 256 input / 32 output tokens, ignore_eos",
        "duration": args.duration,
        "warmup": args.warmup,
        "seeds": args.seeds,
        "sim_commit": _commit(),
        "levels": table,
        "capacity": _crossing(table, runs),
        "sim_lag": lags,
        "runs": runs,
    }
    _store(f"capacity_truth-{args.preset}-{args.by}.json", result)
    print(json.dumps({k: result[k] for k in ("preset", "by", "capacity")}))


def _table(
    levels: list[float], runs: list[dict[str, Any]], open_loop: bool
) -> list[dict[str, Any]]:
    """Per level: each SLO's percentile averaged over seeds, as a share of its limit."""
    table = []
    for level in levels:
        at = [r for r in runs if r["level"] == level]
        row: dict[str, Any] = {"level": level, "steady": all(r["steady"] for r in at)}
        for m, (limit, _) in SLOS.items():
            values = [r[m]["value"] for r in at if r[m]["value"] is not None]
            row[m] = sum(values) / len(values) if values else None
            row[f"{m}_ratio"] = row[m] / limit if values else None
        row["meets"] = (row["steady"] or not open_loop) and all(
            row[f"{m}_ratio"] is not None and row[f"{m}_ratio"] <= 1 for m in SLOS
        )
        table.append(row)
    return table


def _fit(levels: list[float], ratios: list[float]) -> float | None:
    """Where the least-squares line through (level, ratio) crosses 1."""
    n = len(levels)
    mx, my = sum(levels) / n, sum(ratios) / n
    sxx = sum((x - mx) ** 2 for x in levels)
    slope = sum((x - mx) * (y - my) for x, y in zip(levels, ratios, strict=True)) / sxx
    return None if slope <= 0 else round(mx + (1 - my) / slope, 3)


def _crossing(table: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The true capacity (see the module docstring)."""
    top = max(table, key=lambda r: r["level"])
    binding = max(SLOS, key=lambda m: top[f"{m}_ratio"] or 0.0)
    levels = [r["level"] for r in table]
    meets = [r["level"] for r in table if r["meets"]]
    above = [lvl for lvl in levels if not meets or lvl > max(meets)]
    seeds = sorted({r["seed"] for r in runs})
    limit = SLOS[binding][0]
    per_seed = [
        _fit(
            [r["level"] for r in runs if r["seed"] == seed],
            [r[binding]["value"] / limit for r in runs if r["seed"] == seed],
        )
        for seed in seeds
    ]
    return {
        "level": _fit(levels, [r[f"{binding}_ratio"] for r in table]),
        "binding": binding,
        "bracket": [max(meets, default=None), min(above, default=None)],
        "seeds": per_seed,
    }


def retable(args: argparse.Namespace) -> None:
    """Recompute a stored truth's table and capacity from its runs (the rule changed)."""
    path = RESULTS / f"capacity_truth-{args.preset}-{args.by}.json"
    result = json.loads(path.read_text())
    levels = [row["level"] for row in result["levels"]]
    result["levels"] = _table(levels, result["runs"], open_loop=args.by == "rate")
    result["capacity"] = _crossing(result["levels"], result["runs"])
    _store(path.name, result)
    print(json.dumps({k: result[k] for k in ("preset", "by", "capacity")}))


def search(args: argparse.Namespace) -> None:
    out = Path(args.out)
    with simulator(args.preset, out, args.realtime) as sim:
        before = lag(sim + "/metrics")
        started = time.monotonic()
        loadgen(
            [
                *("capacity", "--target", sim, "--server-metrics", sim + "/metrics"),
                *("--by", args.by, *SLO_FLAGS, *WORKLOAD, *args.extra, "--out", str(out)),
            ]
        )
        wall = time.monotonic() - started
        sim_lag = lag_figures(before, lag(sim + "/metrics"))
    found = json.loads((out / "capacity.json").read_text())
    (t,) = found["targets"].values()
    truth_file = RESULTS / f"capacity_truth-{args.preset}-{args.by}.json"
    true = json.loads(truth_file.read_text())["capacity"]["level"] if truth_file.exists() else None
    crossing = t.get("crossing")
    entry = {
        "preset": args.preset,
        "by": args.by,
        "flags": args.extra,
        "capacity": t["capacity"],
        "bracket": t["bracket"],
        "repeat_spread": t.get("repeat"),
        "probes": len(t["probes"]),
        "extended": sum(1 for p in t["probes"] if p.get("extends") is not None),
        "elapsed_s": round(wall),
        "truth": true,
        "error": None if not (true and t["capacity"]) else round(t["capacity"] / true - 1, 3),
        "crossing": crossing,
        "crossing_error": None if not (true and crossing) else round(crossing / true - 1, 3),
        "sim_lag": sim_lag,
        "sim_commit": _commit(),
    }
    path = RESULTS / "capacity_search.json"
    entries = json.loads(path.read_text()) if path.exists() else []
    _store(path.name, [*entries, entry])
    print(json.dumps(entry))


def _commit() -> str:
    """The last commit that touched the simulator: what the figures were measured on."""
    return subprocess.run(
        ["git", "log", "-1", "--format=%h %cs", "--", "loadgen/sim"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _store(name: str, data: Any) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("truth", "search", "retable"):
        p = sub.add_parser(name)
        p.add_argument("--preset", required=True)
        p.add_argument("--by", choices=("rate", "concurrency"), default="rate")
        p.add_argument("--out", help="where the runs go")
        p.add_argument("--nice", type=int, default=-10, help="niceness of all it starts")
        p.add_argument(
            "--realtime",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="run the simulator SCHED_FIFO: a shared box's stand-in for its own cores",
        )
    t = sub.choices["truth"]
    t.add_argument("--levels", required=True, help="comma-separated, near the knee")
    t.add_argument("--seeds", type=int, default=2)
    t.add_argument("--duration", default="45s", type=lambda v: f"{parse_duration(v):g}s")
    t.add_argument("--warmup", default="15s", type=lambda v: f"{parse_duration(v):g}s")
    sub.choices["search"].add_argument("extra", nargs="*", help="more capacity flags (after --)")
    args = parser.parse_args()
    os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by the simulator and loadgen
    if args.command == "truth":
        truth(args)
    elif args.command == "search":
        search(args)
    else:
        retable(args)


if __name__ == "__main__":
    main()
