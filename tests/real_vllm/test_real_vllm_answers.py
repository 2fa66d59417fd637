"""Checked answers against real vLLM: greedy consistency and an eval file, end to end.

The tiny model's weights are random, so what its answers say means nothing; what is checked
is that loadgen's judging works on a real engine: the proxy changes no byte of a greedy
answer, every fixed prompt is answered and judged under load, an eval file is scored, and no
prompt or answer text is written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.support import ROOT
from tests.support.proxy import ProxyProcess

# the first test to run may also wait for the session fixtures (the tiny model, vLLM's start)
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

PROMPTS = 8  # --consistency
SHAPE = ("--input-tokens", "64", "--output-tokens", "16")
# words of the tiny tokenizer's corpus, so prompts tokenize like text; the answers are words
# the prompts do not contain, so finding either in requests.jsonl means text was written
ITEMS = [
    {"prompt": f"the quick brown fox {n} jumps over", "answer": f"zebra{n}", "match": "contains"}
    for n in range(6)
]


def loadgen(out: Path, *flags: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One `python -m loadgen` run: its records and summary."""
    command = [
        *(sys.executable, "-m", "loadgen", "--model", MODEL, *SHAPE, *flags),
        *("--warmup", "0", "--timeout", "120s", "--out", str(out), "--no-progress"),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    records = [orjson.loads(line) for line in (out / "requests.jsonl").open("rb")]
    return records, orjson.loads((out / "summary.json").read_bytes())


def judged(records: list[dict[str, Any]], target: str) -> dict[str, list[dict[str, Any]]]:
    """The target's measured consistency answers, by prompt."""
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["target"] == target and r["excluded"] is None and r["consistency_id"] is not None:
            by_prompt.setdefault(r["consistency_id"], []).append(r)
    return by_prompt


def in_flight(records: list[dict[str, Any]]) -> int:
    """The most of these requests that were open at one moment."""
    edges = sorted([(r["sent_at"], 1) for r in records] + [(r["end_at"], -1) for r in records])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def name(url: str) -> str:
    return url.removeprefix("http://")


def test_greedy_answers_through_the_proxy_are_vllms_byte_for_byte(
    vllm: VLLMServer, vllm_proxy: ProxyProcess, tmp_path: Path
) -> None:
    """At batch 1 (one stream, one target at a time) vLLM's greedy answers repeat exactly, so
    each prompt's answer through the proxy must hash like the direct one (one key per run)."""
    records, summary = loadgen(
        tmp_path / "run",
        *("--target", vllm.url, "--target", vllm_proxy.url, "--consistency", str(PROMPTS)),
        *("--concurrency", "1", "--requests", str(PROMPTS)),
    )
    direct, proxied = judged(records, name(vllm.url)), judged(records, name(vllm_proxy.url))
    assert sorted(direct) == sorted(proxied) == [str(i) for i in range(PROMPTS)]
    for prompt, answers in direct.items():
        hashes = {r["output_hash"] for r in answers + proxied[prompt]}
        assert len(hashes) == 1 and None not in hashes, prompt
    for url in (vllm.url, vllm_proxy.url):
        assert summary["targets"][name(url)]["consistency"] == {
            "prompts": PROMPTS,
            "identical": PROMPTS,
            "share": 1.0,
            "first_difference": None,
        }


def test_batch_1_against_16_streams_is_measured_for_every_prompt(
    vllm_proxy: ProxyProcess, tmp_path: Path
) -> None:
    """The reference is each prompt alone; under 16 streams vLLM batches them, and a CPU
    engine need not be batch-invariant: the share is whatever it is, but it is measured."""
    prompts = 16
    records, summary = loadgen(
        tmp_path / "run",
        *("--target", vllm_proxy.url, "--consistency", str(prompts)),
        *("--concurrency", "16", "--requests", str(2 * prompts)),
    )
    answers = judged(records, name(vllm_proxy.url))
    assert sorted(answers, key=int) == [str(i) for i in range(prompts)]
    assert all(r["ok"] and r["output_hash"] for rs in answers.values() for r in rs)
    assert in_flight([r for rs in answers.values() for r in rs]) > 1  # batched, not alone
    figure = summary["targets"][name(vllm_proxy.url)]["consistency"]
    differing = [r["first_difference"] for rs in answers.values() for r in rs]
    identical = sum(all(r["first_difference"] is None for r in rs) for rs in answers.values())
    assert figure["prompts"] == prompts and figure["identical"] == identical
    assert figure["share"] == identical / prompts
    assert (figure["first_difference"] is None) == all(d is None for d in differing)


def test_an_eval_file_is_scored_through_the_proxy_and_no_text_is_written(
    vllm_proxy: ProxyProcess, tmp_path: Path
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b"".join(orjson.dumps({**i, "max_tokens": 8}) + b"\n" for i in ITEMS))
    out = tmp_path / "run"
    records, summary = loadgen(
        out,
        *("--target", vllm_proxy.url, "--eval", str(items), "--eval-fraction", "0.5"),
        *("--concurrency", "4", "--requests", str(2 * len(ITEMS))),
    )
    scored = [r for r in records if r["eval_id"] is not None]
    assert scored and all(r["ok"] and r["correct"] in (True, False) for r in scored)
    assert {r["eval_id"] for r in scored} == {f"{items}:{n + 1}" for n in range(len(ITEMS))}
    assert len(records) - len(scored) >= len(ITEMS)  # the other half: the ordinary load
    quality = summary["targets"][name(vllm_proxy.url)]["quality"]
    assert quality["items"] == len(ITEMS) and quality["answers"] == len(scored)
    majority = {
        i: sum(r["correct"] for r in scored if r["eval_id"] == i) * 2
        > sum(r["eval_id"] == i for r in scored)
        for i in {r["eval_id"] for r in scored}
    }
    assert quality["correct"] == sum(majority.values())
    assert quality["interval"][0] <= quality["accuracy"] <= quality["interval"][1]
    written = (out / "requests.jsonl").read_text()
    assert all(r["content"] is None for r in records)
    for item in ITEMS:
        assert item["prompt"] not in written and item["answer"] not in written
