"""The twin against real vLLM on a real GPU: fitted at the lowest rate, predicting the rest.

    .venv/bin/python bench/real_gpu_twin.py [--json FILE]

The data is DistServe's published vLLM baseline (docs/sim/opt-13b-a100/NOTICE.txt): OPT-13B
in fp16 on one A100-80GB, ShareGPT requests at Poisson rates of 1 to 4 req/s, each request's
TTFT and TPOT as its client measured them, converted to the proxy's request log lines. The
twin is fitted to the 1 req/s log (`python -m loadgen.sim fit`) from each of two preset
files beside the data, one with a current vLLM's overheads and one with an older one's (one
rate cannot show the cost per sequence, so the start decides it), then each rate's log is
replayed through it (`python -m loadgen --target virtual:fitted.toml --replay rate-R.log`,
with a drain long enough that every request finishes, as every measured one did) and
through the unfitted base preset. Measured and
predicted TTFT/TPOT P50/P90 are over all of a rate's requests.

The knee is where loadgen's steady-state verdict (analysis/steady.py) turns: for the
predictions, what each virtual run's summary says (the twin's queue, read as vLLM's
gauges); for the measurements, the same judge on the records alone (DistServe scraped no
server metrics), which calls a replay saturated when completions fall behind while TTFT
climbs. docs/sim/real-gpus.md shows the tables; tests/sim/twin/test_real_gpus.py (slow)
reruns this and checks the page's figures still hold. About 20 CPU seconds in all.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from loadgen.analysis import stats, steady
from loadgen.analysis.records import Phase, Record
from loadgen.sim.twin import capture

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "sim" / "opt-13b-a100"
# where the fit starts: a current vLLM's overheads, and an older one's (the files say why)
STARTS = {
    "current": DATA / "opt-13b-fp16-a100.toml",
    "older": DATA / "opt-13b-fp16-a100-v0.toml",
}
RATES = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
FIGURES = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
DRAIN = "3600s"  # every replayed request finishes, as every measured one did
WITHIN = 0.25  # the goal: a prediction within 25% of the measurement


def log(rate: float) -> Path:
    return DATA / f"rate-{rate:g}.log"


def shown(command: list[str]) -> str:
    """A command as the page prints it: paths from the repository's root."""
    return shlex.join(
        [a.replace(f"{ROOT}/", "") if a.startswith(str(ROOT)) else a for a in command]
    )


def fit_command(base: Path, out: Path) -> list[str]:
    return [
        "python", "-m", "loadgen.sim", "fit", str(log(RATES[0])), "--preset-file", str(base),
        "--out", str(out),
    ]  # fmt: skip


def replay_command(preset: Path, rate: float, out: Path) -> list[str]:
    return [
        "python", "-m", "loadgen", "--target", f"virtual:{preset}", "--replay", str(log(rate)),
        "--drain", DRAIN, "--no-progress", "--out", str(out),
    ]  # fmt: skip


def _run(command: list[str]) -> None:
    subprocess.run([sys.executable, *command[1:]], check=True, capture_output=True, cwd=ROOT)


def figures(ttfts: list[float], tpots: list[float]) -> dict[str, float | None]:
    ttft, tpot = stats.describe(ttfts, ci=False), stats.describe(tpots, ci=False)
    return {
        "ttft_p50": ttft["p50"],
        "ttft_p90": ttft["p90"],
        "tpot_p50": tpot["p50"],
        "tpot_p90": tpot["p90"],
    }  # type: ignore[dict-item]


def measured(rate: float) -> dict[str, object]:
    """A rate's measured figures and loadgen's verdict on its records (no server gauges)."""
    requests = capture.read([str(log(rate))]).requests
    records = []
    for i, r in enumerate(requests):
        decode = (r.tpot or 0.0) * (r.output_tokens - 1)
        e2e = (r.ttft or 0.0) + decode
        records.append(
            Record(
                request_id=str(i), target="vllm", intended_at=r.arrival, sent_at=r.arrival,
                end_at=r.arrival + e2e, send_lag_s=0.0, ok=True, level=rate, ttft_s=r.ttft,
                tpot_s=r.tpot, e2e_s=e2e, output_tokens=r.output_tokens,
            )
        )  # fmt: skip
    window = max(r.arrival for r in requests)
    phase = Phase(target="vllm", block=0, start_at=0.0, end_at=window, level=rate)
    state = steady.judge(records, [phase], window, open_loop=True, replay=True)
    found: dict[str, object] = figures(
        [r.ttft for r in requests if r.ttft is not None],
        [r.tpot for r in requests if r.tpot is not None],
    )
    return found | {"steady": state["steady"], "completion_per_s": state["completion_per_s"]}


def predicted(preset: Path, rate: float, out: Path) -> dict[str, object]:
    """A rate replayed on the virtual clock: its figures and its summary's verdict."""
    _run(replay_command(preset, rate, out))
    (target,) = json.loads((out / "summary.json").read_text())["targets"].values()
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    done = [r for r in records if r["ok"] and not r["excluded"]]
    found: dict[str, object] = figures(
        [r["ttft_s"] for r in done if r["ttft_s"] is not None],
        [r["tpot_s"] for r in done if r["tpot_s"] is not None],
    )
    state = target["steady_state"]
    return found | {"steady": state["steady"], "completion_per_s": state["completion_per_s"]}


def knee(by_rate: dict[float, dict[str, object]]) -> tuple[float | None, float | None]:
    """(the highest steady rate below the first saturated one, that saturated one)."""
    below = None
    for rate in RATES:
        if not by_rate[rate]["steady"]:
            return below, rate
        below = rate
    return below, None


def measure() -> dict[str, dict[str, object]]:
    """Each starting preset's fit and predictions."""
    return {start: measure_from(base) for start, base in STARTS.items()}


def measure_from(base: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        fitted = directory / "fitted.toml"
        _run(fit_command(base, fitted))
        fit = json.loads((directory / "fit.json").read_text())
        rows = {}
        for rate in RATES:
            rows[rate] = {
                "measured": measured(rate),
                "twin": predicted(fitted, rate, directory / f"twin-{rate:g}"),
                "base": predicted(base, rate, directory / f"base-{rate:g}"),
            }
    return {
        "fit": {
            "fitted": {k: v["value"] for k, v in fit["terms"].items() if v["fitted"]},
            "held_out_error": fit["held_out_error"],
        },
        "rates": rows,
        "knee": {
            who: knee({rate: row[who] for rate, row in rows.items()})
            for who in ("measured", "twin", "base")
        },
    }


def _error(measured_s: object, predicted_s: object) -> float | None:
    if not isinstance(measured_s, float) or not isinstance(predicted_s, float):
        return None
    return predicted_s / measured_s - 1


def _cell(row: dict[str, dict[str, object]], key: str) -> str:
    m, t, b = (row[who][key] for who in ("measured", "twin", "base"))
    te, be = _error(m, t), _error(m, b)
    return (
        f"{_ms(m)} / {_ms(t)} ({_signed(te)}) / {_ms(b)} ({_signed(be)})"
        if te is not None and be is not None
        else "—"
    )


def _ms(seconds: object) -> str:
    if not isinstance(seconds, float):
        return "—"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def _signed(error: float | None) -> str:
    return "—" if error is None else f"{error * 100:+.0f}%"


def _between(pair: tuple[float | None, float | None]) -> str:
    low, high = pair
    if high is None:
        return f"steady up to {low:g} req/s"
    return f"saturates between {low:g} and {high:g} req/s" if low else f"saturated at {high:g}"


def within(found: dict[str, object]) -> tuple[int, int]:
    """(figures within WITHIN, figures) of the twin at the measured steady rates but the
    fitted one."""
    steady_below, _ = found["knee"]["measured"]  # type: ignore[index]
    hits = total = 0
    for rate, row in found["rates"].items():  # type: ignore[attr-defined]
        if rate == RATES[0] or steady_below is None or rate > steady_below:
            continue
        for key in FIGURES:
            error = _error(row["measured"][key], row["twin"][key])
            total += 1
            hits += error is not None and abs(error) <= WITHIN
    return hits, total


def tables(found: dict[str, dict[str, object]]) -> str:
    """Each starting preset's table, headed by its name."""
    return "\n\n".join(
        f"### From the {start} preset\n\n{table(start, found[start])}" for start in found
    )


def table(start: str, found: dict[str, object]) -> str:
    lines = [
        "| rate <!-- key --> | TTFT P50 | TTFT P90 | TPOT P50 | TPOT P90 "
        "| steady (measured / twin / base) |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for rate, row in found["rates"].items():  # type: ignore[attr-defined]
        cells = [_cell(row, key) for key in FIGURES]
        verdicts = " / ".join(
            "yes" if row[who]["steady"] else "SATURATED" for who in ("measured", "twin", "base")
        )
        label = f"{rate:g} req/s" + (" (fitted)" if rate == RATES[0] else "")
        key = f"{start}-rate-{rate:g}".replace(".", "_")
        lines.append(f"| {label} <!-- {key} --> | {' | '.join(cells)} | {verdicts} |")
    knees = found["knee"]  # type: ignore[index]
    hits, total = within(found)
    lines += [
        "",
        "| | knee |",
        "|---|---|",
        *(f"| {who} <!-- {start}-knee-{who} --> | {_between(knees[who])} |" for who in knees),
        "",
        f"Within 25% below the measured knee (but the fitted rate): {hits} of {total} figures.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    found = measure()
    for start, base in STARTS.items():
        print(f"# fit, from the {start} preset\n" + shown(fit_command(base, Path("fitted.toml"))))
    each = replay_command(Path("fitted.toml"), 2.0, Path("twin-2"))
    print("# each rate R, fitted and base\n" + shown(each))
    for start in STARTS:
        print(f"\n{start}: {found[start]['fit']}")
    print()
    print(tables(found))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
