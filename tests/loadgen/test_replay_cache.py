"""A Mooncake replay on loadgen.sim hits the prefix cache exactly where the trace's hash_ids
say it should: a request's hit is the longest run of leading ids some earlier request had as
its own leading ids, in blocks of --replay-block-tokens, capped (as vLLM caps it) at the
prompt's length less one token, in the server's 16-token blocks. Completions requests, so
no chat template shifts the blocks' boundaries."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.cli import main
from loadgen.processes import simulator
from tests.loadgen.test_prompt_cache import hits

BLOCK = 32  # trace tokens per hash id
SERVER_BLOCK = 16  # the simulator's KV block (vLLM's default)
TRACE = [  # (hash_ids, input tokens)
    ([0, 1, 2], 96),
    ([0, 1, 3], 96),  # shares blocks 0 and 1
    ([0, 4], 64),  # shares block 0
    ([5, 1, 2], 96),  # id 1 again, but after another root: a different prefix, no hit
    ([0, 1, 2, 6], 128),  # shares the first request's three blocks
    ([0, 1, 2], 96),  # all of it seen: capped at 95 tokens, 5 server blocks
    ([0, 1, 2, 6, 7], 150),  # a partial last block of its own
]


def expected_hits() -> list[int]:
    seen: set[tuple[int, ...]] = set()
    out = []
    for ids, tokens in TRACE:
        shared = max((k for k in range(len(ids) + 1) if tuple(ids[:k]) in seen), default=0)
        cached = min(shared * BLOCK, tokens - 1)
        out.append(cached // SERVER_BLOCK * SERVER_BLOCK)
        seen.update(tuple(ids[:k]) for k in range(1, len(ids) + 1))
    return out


@pytest.fixture()
def sim() -> Iterator[str]:
    with simulator("--preset", "llama-70b-bf16-tp4-a100") as url:
        yield url


@pytest.mark.slow
def test_a_mooncake_replay_hits_block_for_block(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": i * 700, "input_length": n, "output_length": 2, "hash_ids": ids}
        for i, (ids, n) in enumerate(TRACE)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps: list[float] = []  # each rise of the hit counter, in order
    done = threading.Event()

    def watch() -> None:
        last = hits(sim)
        while not done.is_set():
            now = float(hits(sim))
            if now != last:
                steps.append(now - last)
                last = now
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    before = hits(sim)
    watcher.start()
    try:
        argv = ["--target", sim, "--replay", str(trace), "--endpoint", "completions"]
        argv += ["--replay-block-tokens", str(BLOCK), "--out", str(tmp_path / "run")]
        assert main([*argv, "--no-progress"]) == 0
        time.sleep(0.1)
    finally:
        done.set()
        watcher.join()
    want = expected_hits()
    assert want == [0, 64, 32, 0, 96, 80, 128]
    assert hits(sim) - before == sum(want)
    assert steps == [n for n in want if n]  # request by request, 0.7 s apart
    records = [
        json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    ]
    assert [r["input_tokens"] for r in sorted(records, key=lambda r: r["replay_index"])] == [
        n for _, n in TRACE
    ]
