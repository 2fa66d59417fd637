"""The founding documents' what-ifs, answered on the simulator's virtual clock.

    .venv/bin/python bench/sim_whatifs.py [--json FILE]

Each row is one `python -m loadgen --target virtual:PRESET --virtual-args "…"` run (printed
above the tables, as docs/sim/what-ifs.md shows them): 512 prompt and exactly 256 output
tokens a request, Poisson arrivals, 600 measured requests after a 30 s warm-up, seed 1. The
SLO is the documents' (and loadgen's default): TTFT ≤ 800 ms and TPOT ≤ 50 ms at P99.
"Carries" is the highest rate on a 0.25 req/s grid up to 10 that meets the SLO with the
server keeping up (loadgen's steady-state verdict), found by bisection.

The tables are docs/sim/what-ifs.md's; tests/sim/twin/test_whatifs.py (slow) reruns this and
checks the page's figures still hold. Runs take ~1–4 s each (about two minutes in all).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadgen.sim.model import presets

SEEDS_FLAGS = "--max-num-batched-tokens 8192 --max-model-len 2048 --gpu-memory-utilization 0.85"
RATE = 10.0  # the documents' load, req/s
LOW = 1.0  # a load every setup here carries: the unloaded figures
GRID = [0.25 * i for i in range(1, 41)]  # 0.25 … 10 req/s
SLO_TTFT, SLO_TPOT = 0.8, 0.05
DRAFT = (
    '{{"method": "draft_model", "model": "{}", "num_speculative_tokens": 5, '
    '"acceptance_rate": 0.75}}'
)
NGRAM = '{"method": "ngram", "num_speculative_tokens": 5, "acceptance_rate": 0.75}'


@dataclass(frozen=True)
class Setup:
    key: str
    label: str
    preset: str  # a bundled name or a file
    args: str
    error: str  # how far the preset is from published measurements (docs/sim/calibration.md)

    def command(self, rate: float, out: str) -> list[str]:
        return [
            "python", "-m", "loadgen", "--target", f"virtual:{self.preset}",
            "--virtual-args", self.args, "--rate", f"{rate:g}", "--requests", "600",
            "--warmup", "30s", "--input-tokens", "512", "--output-tokens", "256",
            "--seed", "1", "--out", out,
        ]  # fmt: skip


INT4 = "none: no int4 serving run was replayed"
BF16 = "TTFT P50 −7…+3%, TPOT P50 +2…+7%"
ASCEND = "none: a datasheet estimate"


def setups(ascend_seeds_card: str) -> list[Setup]:
    llama, qwen = "llama-70b-awq-tp4-a100", "qwen-72b-gptq-tp4-a100"
    awq = f"{SEEDS_FLAGS} --quantization awq --dtype float16"
    gptq = f"{SEEDS_FLAGS} --quantization gptq"
    tp2 = "--tensor-parallel-size 2"
    ascend = "ascend-910b-llama-70b-int8-tp8"
    return [
        Setup("llama-int4-4xa100", "LLaMA-70B AWQ, 4×A100", llama, awq, INT4),
        Setup("qwen-int4-4xa100", "Qwen-72B GPTQ, 4×A100", qwen, gptq, INT4),
        Setup(
            "llama-bf16-4xa100", "LLaMA-70B BF16, 4×A100", "llama-70b-bf16-tp4-a100",
            SEEDS_FLAGS, BF16,
        ),
        Setup(
            "qwen-bf16-4xa100", "Qwen-72B BF16, 4×A100", "qwen-72b-bf16-tp4-a100",
            SEEDS_FLAGS, BF16,
        ),
        Setup("llama-int4-2xa100", "LLaMA-70B AWQ, 2×A100", llama, f"{awq} {tp2}", INT4),
        Setup(
            "llama-int4-2xa100-draft", "+ Llama-3-8B AWQ draft, k=5, 75%", llama,
            f"{awq} {tp2} --speculative-config '{DRAFT.format('llama-3-8b-awq-a100')}'", INT4,
        ),
        Setup(
            "llama-int4-2xa100-ngram", "+ a free drafter (n-gram), k=5, 75%", llama,
            f"{awq} {tp2} --speculative-config '{NGRAM}'", INT4,
        ),
        Setup("qwen-int4-2xa100", "Qwen-72B GPTQ, 2×A100", qwen, f"{gptq} {tp2}", INT4),
        Setup(
            "qwen-int4-2xa100-draft", "+ Qwen-7B GPTQ draft, k=5, 75%", qwen,
            f"{gptq} {tp2} --speculative-config '{DRAFT.format('qwen-7b-gptq-a100')}'", INT4,
        ),
        Setup(
            "ascend-int8-8x910b", "LLaMA-70B int8, 8×910B (CANN figures)", ascend,
            SEEDS_FLAGS, ASCEND,
        ),
        Setup(
            "ascend-int8-8x910b-32gb", "LLaMA-70B int8, 8×910B 32 GB, 1.2 TB/s (the documents')",
            ascend_seeds_card, SEEDS_FLAGS, ASCEND,
        ),
    ]  # fmt: skip


def seeds_card(directory: Path) -> str:
    """The documents' 910B: 32 GB at 1.2 TB/s, otherwise the bundled preset. Its file."""
    base = presets.load("ascend-910b-llama-70b-int8-tp8")
    hardware = dataclasses.replace(base.perf.hardware, gpu_memory=32 * 2**30, hbm_bandwidth=1.2e12)
    card = dataclasses.replace(base, perf=dataclasses.replace(base.perf, hardware=hardware))
    path = directory / "ascend-910b-32gb.toml"
    path.write_text(presets.dump(card))
    return str(path)


def run(setup: Setup, rate: float, directory: Path) -> dict[str, float | bool | None]:
    """One virtual run's figures (seconds), and whether it met the SLO while keeping up."""
    out = directory / f"{setup.key}-{rate:g}"
    command = [sys.executable, *setup.command(rate, str(out))[1:]]
    subprocess.run(command, check=True, capture_output=True)
    summary = json.loads((out / "summary.json").read_text())
    target = next(iter(summary["targets"].values()))
    metrics = target["metrics"]
    figures: dict[str, float | bool | None] = {
        f"{name}_{p}": metrics[f"{name}_s"][p] for name in ("ttft", "tpot") for p in ("p50", "p99")
    }
    figures["completed_per_s"] = target["steady_state"]["completion_per_s"]
    figures["steady"] = bool(target["steady_state"]["steady"])
    ttft, tpot = figures["ttft_p99"], figures["tpot_p99"]  # None: no request finished
    finished = isinstance(ttft, float) and isinstance(tpot, float)
    met = finished and ttft <= SLO_TTFT and tpot <= SLO_TPOT
    figures["meets"] = bool(figures["steady"] and met)
    return figures


def carried(setup: Setup, directory: Path) -> float:
    """The highest grid rate that meets the SLO (0: none), by bisection: latency grows with
    the rate, so meeting it is monotone."""
    lo, hi = -1, len(GRID)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(setup, GRID[mid], directory)["meets"]:
            lo = mid
        else:
            hi = mid
    return GRID[lo] if lo >= 0 else 0.0


def shown(command: list[str]) -> str:
    """The command as a shell line, --virtual-args in double quotes (it holds single ones)."""
    words = [shlex.quote(word) for word in command]
    at = command.index("--virtual-args") + 1
    words[at] = '"' + command[at].replace('"', '\\"') + '"'
    return " ".join(words)


def measure() -> dict[str, dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        found: dict[str, dict[str, object]] = {}
        for setup in setups(seeds_card(directory)):
            found[setup.key] = {
                "label": setup.label,
                "command": shown(setup.command(RATE, f"runs/{setup.key}")).replace(
                    f"{directory}/", ""
                ),
                "at_rate": run(setup, RATE, directory),
                "at_low": run(setup, LOW, directory),
                "carries": carried(setup, directory),
                "error": setup.error,
            }
        return found


def table(found: dict[str, dict[str, object]]) -> str:
    """The page's table: one row per setup (ms; '>10 s' beyond; '—': none finished)."""
    lines = [
        f"| setup | at {LOW:g} req/s: TTFT P50 / P99 | TPOT P50 / P99 | at {RATE:g} req/s "
        "| carries (SLO met) | error (calibration) |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in found.items():
        low, high = row["at_low"], row["at_rate"]
        assert isinstance(low, dict) and isinstance(high, dict)
        lines.append(
            f"| {row['label']} <!-- {key} --> | {_pair(low, 'ttft')} | {_pair(low, 'tpot')} | "
            f"{_verdict(high)} | {row['carries']:g} req/s | {row['error']} |"
        )
    return "\n".join(lines)


def _verdict(figures: dict[str, float | bool | None]) -> str:
    done = f"completes {figures['completed_per_s']:.1f} req/s"
    if figures["steady"]:
        return f"keeps up: TTFT P50 {_ms(figures['ttft_p50'])}, {done}"
    return f"saturated: {done}"


def _pair(figures: dict[str, float | bool | None], name: str) -> str:
    return f"{_ms(figures[f'{name}_p50'])} / {_ms(figures[f'{name}_p99'])}"


def _ms(seconds: float | bool | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1e3:,.0f}" if seconds < 10 else f"{seconds:,.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    found = measure()
    for row in found.values():
        print(f"# {row['label']}\n{row['command']}")
    print()
    print(table(found))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
