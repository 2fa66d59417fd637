"""vLLM's prefix cache against loadgen's prompts: a repeated prompt hits it, loadgen's default
prompts (fresh per request and per run) do not, --shared-prefix-tokens does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.support import ROOT

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]
HITS = "vllm:prefix_cache_hits_total"


def loadgen(vllm: VLLMServer, out: Path, *flags: str) -> None:
    command = [
        *(sys.executable, "-m", "loadgen", "--target", vllm.url, "--model", MODEL),
        *("--endpoint", "completions", "--concurrency", "1", "--requests", "4", "--seed", "3"),
        *("--input-tokens", "400", "--output-tokens", "2", "--warmup", "0s"),
        *("--timeout", "120s", "--out", str(out), "--no-progress", *flags),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_identical_prompts_hit_vllms_prefix_cache(vllm: VLLMServer) -> None:
    body = {"model": MODEL, "prompt": "the cache " * 200, "max_tokens": 2}
    before = vllm.settled_metric(HITS)
    for _ in range(2):
        assert httpx.post(vllm.url + "/v1/completions", json=body, timeout=120).status_code == 200
    # 400-odd tokens: at least one full block whatever the block size (16 on GPUs, up to 128)
    assert vllm.settled_metric(HITS) - before >= 128


def test_loadgen_default_prompts_miss_and_a_shared_prefix_hits(
    vllm: VLLMServer, tmp_path: Path
) -> None:
    before = vllm.settled_metric(HITS)
    loadgen(vllm, tmp_path / "a")
    loadgen(vllm, tmp_path / "b")  # the same command again: still nothing cached to reuse
    after = vllm.settled_metric(HITS)
    assert after == before
    loadgen(vllm, tmp_path / "shared", "--shared-prefix-tokens", "300")
    assert vllm.settled_metric(HITS) - after >= 3 * 128  # 3 requests after the first, ≥ a block
