"""loadgen's prompts against loadgen.sim's prefix cache: fresh per request and per run by
default, repeatable with --prompt-seed, shared for --shared-prefix-tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.stack.processes import simulator

QUICK = ["--input-tokens", "200", "--output-tokens", "2", "--warmup", "0s", "--no-progress"]


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--preset", "llama-70b-bf16-tp4-a100") as url:
        yield url


def hits(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total{"):
            return float(line.rpartition(" ")[2])
    raise AssertionError("no vllm:prefix_cache_hits_total")


def run(url: str, out: Path, *flags: str) -> rundir.RunData:
    argv = ["--target", url, "--requests", "6", "--concurrency", "2", "--out", str(out)]
    assert main([*argv, *QUICK, "--seed", "7", *flags]) == 0
    return rundir.read(out)


def test_default_prompts_miss_the_cache_even_when_the_command_repeats(
    sim: str, tmp_path: Path
) -> None:
    before = hits(sim)
    first = run(sim, tmp_path / "a")
    second = run(sim, tmp_path / "b")
    assert hits(sim) == before  # not one block of any prompt was seen before
    assert first.meta["prompts"]["seed"] != second.meta["prompts"]["seed"]
    lengths = [[r.output_tokens for r in d.records] for d in (first, second)]
    assert lengths[0] == lengths[1]  # --seed still repeats what it seeds


def test_prompt_seed_repeats_the_prompts_and_so_hits(sim: str, tmp_path: Path) -> None:
    run(sim, tmp_path / "a", "--prompt-seed", "11")
    before = hits(sim)
    again = run(sim, tmp_path / "b", "--prompt-seed", "11")
    assert again.meta["prompts"] == {"seed": 11, "shared_prefix_tokens": 0}
    assert hits(sim) - before >= 6 * (200 // 16 - 1) * 16  # nearly whole prompts, each


def test_a_shared_prefix_hits_for_every_request_but_the_first(sim: str, tmp_path: Path) -> None:
    before = hits(sim)
    data = run(sim, tmp_path / "run", "--shared-prefix-tokens", "64")
    assert data.meta["prompts"]["shared_prefix_tokens"] == 64
    gained = hits(sim) - before
    # role header + lead word + 64 shared words: 4 full blocks of 16 in common
    assert 4 * 16 * 4 <= gained <= 5 * 16 * 5 and gained % 16 == 0
