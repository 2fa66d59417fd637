"""The twin against real vLLM on real GPUs: fitted at the lowest rate, predicting the rest.

    .venv/bin/python bench/real_gpu_twin.py [--json FILE]

Two published data sets, each real vLLM serving ShareGPT requests at several Poisson rates,
every request's TTFT and TPOT as its client measured them:

- DistServe's vLLM baseline (docs/sim/opt-13b-a100/NOTICE.txt): OPT-13B in fp16 on one
  A100-80GB at 1 to 4 req/s, converted to the proxy's request log lines. The twin is fitted
  to the 1 req/s log from each of two preset files beside the data, one with a current
  vLLM's overheads and one with an older one's (one rate cannot show the cost per
  sequence, so the start decides it).
- vLLM 0.8.3's own benchmark_serving.py results (docs/sim/llama-3.3-70b-tp8-a100/NOTICE.txt):
  Llama-3.3-70B in bf16 with tensor parallel 8 on A100-40GBs at 1, 4 and 16 req/s and all at
  once, fitted as published (their arrivals rebuilt from the rate and seed) from the preset
  the GPU catalogue and the model's config.json derive.

Each rate is then replayed through the fitted twin (`python -m loadgen --target
virtual:fitted.toml --replay rate-R.log`, with a drain long enough that every request
finishes, as every measured one did; a vLLM bench file turned into log lines first by
examples/traces/fit_source_proxy_log.py) and through the unfitted base preset. Measured and
predicted TTFT/TPOT P50/P90 are over all of a rate's requests.

The knee is where loadgen's steady-state verdict (analysis/steady.py) turns: for the
predictions, what each virtual run's summary says (the twin's queue, read as vLLM's
gauges); for the measurements, the same judge on the records alone (no server metrics were
scraped), which calls a replay saturated when completions fall behind while TTFT climbs.
docs/sim/real-gpus.md shows the tables; tests/sim/twin/test_real_gpus.py (slow) reruns this
and checks the page's figures still hold.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadgen.analysis import stats, steady
from loadgen.analysis.records import Phase, Record
from loadgen.sim.twin import capture

ROOT = Path(__file__).resolve().parents[1]
CONVERT = ROOT / "examples" / "traces" / "fit_source_proxy_log.py"
FIGURES = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
DRAIN = "3600s"  # every replayed request finishes, as every measured one did
WITHIN = 0.25  # the goal: a prediction within 25% of the measurement


@dataclass(frozen=True)
class DataSet:
    """Published measurements at several rates (the first fitted), a file per rate."""

    directory: Path
    rates: tuple[float, ...]
    suffix: str = ".log"  # the proxy's log lines, which --replay reads; else converted

    def source(self, rate: float) -> Path:
        return self.directory / f"rate-{rate:g}{self.suffix}"


@dataclass(frozen=True)
class Start:
    """The unfitted preset a fit starts from: as the fit takes it, and as a replay's target.
    cached: the rates after the first replayed with their prompts in vLLM's prefix cache
    (sent after the same prompts on the same server: fit_source_proxy_log.py says how)."""

    data: DataSet
    fit_from: tuple[str, ...]
    target: tuple[str, ...]
    title: str
    cached: bool = False


def _preset_file(data: DataSet, name: str, title: str) -> Start:
    path = data.directory / name
    return Start(data, ("--preset-file", str(path)), (f"virtual:{path}",), title)


def _catalogue(data: DataSet, model: str, engine: str, title: str, cached: bool) -> Start:
    """A preset the GPU catalogue and the model's config.json derive, with vLLM's flags."""
    config = data.directory / "config.json"
    derived = f"{model} --model-config {config} --dtype bf16"
    return Start(
        data,
        (*shlex.split(derived), "--virtual-args", engine),
        ("virtual:", "--virtual-args", f"{derived} {engine}"),
        title,
        cached,
    )


OPT = DataSet(ROOT / "docs" / "sim" / "opt-13b-a100", (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0))
LLAMA = DataSet(
    ROOT / "docs" / "sim" / "llama-3.3-70b-tp8-a100", (1.0, 4.0, 16.0, math.inf), ".json"
)
LLAMA_GPU, LLAMA_FLAGS = "--gpu a100-sxm-40gb", "-tp 8 --enable-prefix-caching"
# where each fit starts: for OPT-13B a current vLLM's overheads and an older one's (the
# files say why); for Llama the catalogue's A100-40GB with the server's flags, its later
# runs replayed as published and as served (their prompts cached by the runs before)
STARTS = {
    "current": _preset_file(OPT, "opt-13b-fp16-a100.toml", "From the current preset"),
    "older": _preset_file(OPT, "opt-13b-fp16-a100-v0.toml", "From the older preset"),
    "catalogue": _catalogue(
        LLAMA, LLAMA_GPU, LLAMA_FLAGS, "From the catalogue's preset, as published", False
    ),
    "cached": _catalogue(
        LLAMA, LLAMA_GPU, LLAMA_FLAGS, "From the catalogue's preset, prompts cached", True
    ),
}


def shown(command: list[str]) -> str:
    """A command as the page prints it: paths from the repository's root."""
    return shlex.join([a.replace(f"{ROOT}/", "") for a in command])


def fit_command(start: Start, out: Path) -> list[str]:
    source = start.data.source(start.data.rates[0])
    return ["python", "-m", "loadgen.sim", "fit", str(source), *start.fit_from, "--out", str(out)]


def replay_command(target: tuple[str, ...], trace: Path, out: Path) -> list[str]:
    return [
        "python", "-m", "loadgen", "--target", *target, "--replay", str(trace),
        "--drain", DRAIN, "--no-progress", "--out", str(out),
    ]  # fmt: skip


def convert_command(source: Path, cached: bool = False) -> list[str]:
    return ["python", str(CONVERT), str(source), *(["--prompts-cached"] if cached else [])]


def _run(command: list[str]) -> bytes:
    done = subprocess.run([sys.executable, *command[1:]], check=True, capture_output=True, cwd=ROOT)
    return done.stdout


def trace(start: Start, rate: float, directory: Path) -> Path:
    """What --replay reads for a rate: its file, or its file turned into log lines."""
    source = start.data.source(rate)
    if source.suffix == ".log":
        return source
    cached = start.cached and rate != start.data.rates[0]
    converted = directory / f"{'cached' if cached else 'rate'}-{rate:g}.log"
    converted.write_bytes(_run(convert_command(source, cached)))
    return converted


def figures(ttfts: list[float], tpots: list[float]) -> dict[str, float | None]:
    ttft, tpot = stats.describe(ttfts, ci=False), stats.describe(tpots, ci=False)
    return {
        "ttft_p50": ttft["p50"],
        "ttft_p90": ttft["p90"],
        "tpot_p50": tpot["p50"],
        "tpot_p90": tpot["p90"],
    }  # type: ignore[dict-item]


def measured(data: DataSet, rate: float) -> dict[str, object]:
    """A rate's measured figures and loadgen's verdict on its records (no server gauges)."""
    requests = capture.read([str(data.source(rate))]).requests
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


def predicted(command: list[str], out: Path) -> dict[str, object]:
    """A rate replayed on the virtual clock: its figures and its summary's verdict."""
    _run(command)
    (target,) = json.loads((out / "summary.json").read_text())["targets"].values()
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    done = [r for r in records if r["ok"] and not r["excluded"]]
    found: dict[str, object] = figures(
        [r["ttft_s"] for r in done if r["ttft_s"] is not None],
        [r["tpot_s"] for r in done if r["tpot_s"] is not None],
    )
    state = target["steady_state"]
    return found | {"steady": state["steady"], "completion_per_s": state["completion_per_s"]}


def knee(
    rates: tuple[float, ...], by_rate: dict[float, dict[str, object]]
) -> tuple[float | None, float | None]:
    """(the highest steady rate below the first saturated one, that saturated one)."""
    below = None
    for rate in rates:
        if not by_rate[rate]["steady"]:
            return below, rate
        below = rate
    return below, None


def measure() -> dict[str, dict[str, object]]:
    """Each starting preset's fit and predictions."""
    return {name: measure_from(start) for name, start in STARTS.items()}


def measure_from(start: Start) -> dict[str, object]:
    data = start.data
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        fitted = directory / "fitted.toml"
        _run(fit_command(start, fitted))
        fit = json.loads((directory / "fit.json").read_text())
        rows = {}
        for rate in data.rates:
            replayed = trace(start, rate, directory)
            twin, base = directory / f"twin-{rate:g}", directory / f"base-{rate:g}"
            rows[rate] = {
                "measured": measured(data, rate),
                "twin": predicted(replay_command((f"virtual:{fitted}",), replayed, twin), twin),
                "base": predicted(replay_command(start.target, replayed, base), base),
            }
    return {
        "fit": {
            "fitted": {k: v["value"] for k, v in fit["terms"].items() if v["fitted"]},
            "held_out_error": fit["held_out_error"],
        },
        "rates": rows,
        "knee": {
            who: knee(data.rates, {rate: row[who] for rate, row in rows.items()})
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


def _load(rate: float) -> str:
    return "all at once" if math.isinf(rate) else f"{rate:g} req/s"


def _between(pair: tuple[float | None, float | None]) -> str:
    low, high = pair
    if high is None:
        return "steady at every load" if low == math.inf else f"steady up to {_load(low)}"
    if low is None:
        return f"saturated at {_load(high)}"
    if math.isinf(high):
        return f"steady up to {_load(low)}, saturated all at once"
    return f"saturates between {low:g} and {high:g} req/s"


def within(start: Start, found: dict[str, object]) -> tuple[int, int]:
    """(figures within WITHIN, figures) of the twin at the measured steady rates but the
    fitted one."""
    steady_below, _ = found["knee"]["measured"]  # type: ignore[index]
    hits = total = 0
    for rate, row in found["rates"].items():  # type: ignore[attr-defined]
        if rate == start.data.rates[0] or steady_below is None or rate > steady_below:
            continue
        for key in FIGURES:
            error = _error(row["measured"][key], row["twin"][key])
            total += 1
            hits += error is not None and abs(error) <= WITHIN
    return hits, total


def tables(found: dict[str, dict[str, object]]) -> str:
    """Each starting preset's table, headed by its name."""
    return "\n\n".join(f"### {STARTS[name].title}\n\n{table(name, found[name])}" for name in found)


def table(name: str, found: dict[str, object]) -> str:
    start = STARTS[name]
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
        label = _load(rate) + (" (fitted)" if rate == start.data.rates[0] else "")
        key = f"{name}-rate-{rate:g}".replace(".", "_")
        lines.append(f"| {label} <!-- {key} --> | {' | '.join(cells)} | {verdicts} |")
    knees = found["knee"]  # type: ignore[index]
    hits, total = within(start, found)
    lines += [
        "",
        "| | knee |",
        "|---|---|",
        *(f"| {who} <!-- {name}-knee-{who} --> | {_between(knees[who])} |" for who in knees),
        "",
        f"Within 25% below the measured knee (but the fitted rate): {hits} of {total} figures.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    found = measure()
    for name, start in STARTS.items():
        rate = start.data.rates[1]
        source, log = start.data.source(rate), Path(f"rate-{rate:g}.log")
        print(f"# fit, from the {name} preset\n" + shown(fit_command(start, Path("fitted.toml"))))
        if source.suffix != ".log":
            converted = shown(convert_command(source, start.cached))
            print(f"# each rate R as log lines\n{converted} > {log}")
        for who, target in (("fitted", ("virtual:fitted.toml",)), ("base", start.target)):
            print(f"# each rate R, {who}\n" + shown(replay_command(target, log, Path(who))))
    for name in STARTS:
        print(f"\n{name}: {found[name]['fit']}")
    print()
    print(tables(found))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
