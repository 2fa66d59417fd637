"""Consistency and energy against the simulator: greedy answers are the same alone and under
load, directly and through the proxy (which changes no byte), and the J/token loadgen reports
is the simulator's own energy over the tokens it generated."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from loadgen.commands.cli import main
from loadgen.sim.model import presets
from loadgen.stack.processes import simulator
from tests.support.proxy import ProxyProcess

pytestmark = pytest.mark.slow
PRESET = "llama-70b-awq-tp4-a100"


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--preset", PRESET) as url:
        yield url


def counters(url: str) -> tuple[float, float]:
    """The simulator's joules (all GPUs) and generated tokens so far."""
    joules = tokens = 0.0
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"):
            joules += float(line.rsplit(" ", 1)[1]) / 1000
        elif line.startswith("vllm:generation_tokens_total{"):
            tokens += float(line.rsplit(" ", 1)[1])
    return joules, tokens


def loadgen(out: Path, *args: str) -> dict:
    assert main(["--out", str(out), "--no-progress", "--warmup", "0", *args]) == 0
    return json.loads((out / "summary.json").read_text())


def test_joules_per_token_is_the_models_energy_over_its_tokens(sim: str, tmp_path: Path) -> None:
    """Prompts from a file: no /tokenize calibration idles the GPUs before the load."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{"word " * 200}{i}"}}\n' for i in range(32)))
    before, started = counters(sim), time.time()
    summary = loadgen(
        tmp_path / "run",
        *("--target", sim, "--concurrency", "16", "--requests", "96"),
        *("--dataset", str(prompts), "--output-tokens", "64"),
        *("--gpu-metrics", sim + "/metrics", "--gpu-interval", "0.1s"),
    )
    after, ended = counters(sim), time.time()
    (t,) = summary["targets"].values()
    energy = t["energy"]
    assert energy["source"] == "energy counter"
    # the counters also span loadgen's start and its report writing, with the GPUs idle
    (phase,) = json.loads((tmp_path / "run" / "run.json").read_text())["phases"]
    idle_s = (ended - started) - (phase["done_at"] - phase["start_at"])
    idle_j = idle_s * 4 * presets.load(PRESET).perf.hardware.idle_watts
    model = (after[0] - before[0] - idle_j) / (after[1] - before[1])
    assert energy["joules_per_output_token"] == pytest.approx(model, rel=0.03)
    watts_per_gpu = energy["mean_power_w"] / 4
    assert 150 < watts_per_gpu < 400  # modelled from the steps, not the board's 400 W


def test_greedy_outputs_are_identical_alone_under_load_and_through_the_proxy(
    sim: str, start_proxy: Callable[..., ProxyProcess], tmp_path: Path
) -> None:
    proxy = start_proxy("--upstream", sim)
    summary = loadgen(
        tmp_path / "run",
        *("--target", sim, "--target", proxy.url, "--concurrency", "16", "--requests", "48"),
        *("--consistency", "8", "--eval", "builtin:copy", "--eval-fraction", "0.25"),
        *("--input-tokens", "128", "--output-tokens", "16"),
    )
    for t in summary["targets"].values():
        assert t["consistency"] == {
            "prompts": 8,
            "identical": 8,
            "share": 1.0,
            "first_difference": None,
        }
        assert t["quality"]["accuracy"] == 0  # the simulator's words do not copy strings
    records = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().split()]
    hashes = {}
    for r in records:
        if r["consistency_id"] is not None:
            hashes.setdefault(r["consistency_id"], set()).add(r["output_hash"])
    assert len(hashes) == 8 and all(len(h) == 1 for h in hashes.values())  # same bytes
