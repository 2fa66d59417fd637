"""Every workload on a virtual: target: conversations with think time grow their prompts and
hit the prefix cache on what the turn before left; a shared prefix and a trace's shared
blocks are cache hits that lower TTFT; dataset prompts are counted by the simulator's rule;
records carry the stream's gaps, consistent with TPOT; slices of a virtual run work. Each is
the twin's own figure for the same requests."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from loadgen.commands.cli import main
from loadgen.sim import twin
from loadgen.sim.model import presets

PRESET = "llama-70b-bf16-tp4-a100"
TARGET = f"virtual:{PRESET}"
BLOCK = presets.load(PRESET).engine.block_size


def virtual_run(out: Path, *flags: str) -> tuple[dict, list[dict]]:
    code = main(["--target", TARGET, "--out", str(out), "--no-progress", *flags])
    assert code == 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    return json.loads((out / "summary.json").read_text()), [json.loads(x) for x in lines]


def test_turns_grow_their_prompts_and_are_the_twins_conversations(tmp_path: Path):
    load = ("--rate", "1", "--duration", "12s", "--warmup", "0s", "--drain", "600s")
    talk = ("--turns", "3", "--think-time", "1s-3s", "--input-tokens", "100-400")
    _summary, records = virtual_run(tmp_path / "run", *load, *talk)
    start = json.loads((tmp_path / "run" / "run.json").read_text())["phases"][0]["start_at"]
    by_session: dict[str, list[dict]] = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r)
    assert len(by_session) > 5 and max(len(turns) for turns in by_session.values()) == 3
    requests = []
    for turns in by_session.values():
        assert [r["turn"] for r in turns] == list(range(1, len(turns) + 1))
        assert turns[0]["cached_tokens"] == 0
        for before, r in pairwise(turns):
            new = r["input_tokens"] - before["input_tokens"] - before["output_tokens"]
            assert 100 <= new <= 400  # the history, then a new message
            assert 1.0 <= r["intended_at"] - before["end_at"] <= 3.0 + 1e-6
            # the whole history is cached but the block its last token is in
            context = before["input_tokens"] + before["output_tokens"] - 1
            assert r["cached_tokens"] == context // BLOCK * BLOCK
        for k, r in enumerate(turns):
            think = r["intended_at"] - turns[k - 1]["end_at"] if k else 0.0
            requests.append(
                twin.Request(
                    r["intended_at"] - start,
                    r["input_tokens"],
                    r["output_tokens"],
                    prefix=((r["session"], r["input_tokens"] + r["output_tokens"]),),
                    parent=len(requests) - 1 if k else None,
                    gap_s=think,
                )
            )
    timings = twin.run(presets.load(PRESET), requests).timings
    ordered = [r for turns in by_session.values() for r in turns]
    assert all(r["intended_at"] - start < 12.0 for r in ordered)  # none sent past the window
    assert [r["ttft_s"] for r in ordered] == pytest.approx([t.ttft for t in timings], rel=1e-4)
    assert [r["tpot_s"] for r in ordered] == pytest.approx([t.tpot for t in timings], rel=1e-4)
    assert [r["cached_tokens"] for r in ordered] == [t.cached_tokens for t in timings]


def test_a_closed_loop_runs_conversations_back_to_back(tmp_path: Path):
    load = ("--concurrency", "3", "--requests", "30", "--warmup", "0s")
    _summary, records = virtual_run(tmp_path / "run", *load, "--turns", "4", "--think-time", "2s")
    assert sum(r["excluded"] is None for r in records) == 30
    sessions = {r["session"] for r in records}
    assert len(sessions) >= 3 * 2  # every stream went on to a second conversation
    later = [r for r in records if r["turn"] > 1]
    assert later and all(r["cached_tokens"] > 0 for r in later)


def test_a_shared_prefix_is_a_cache_hit_that_lowers_ttft(tmp_path: Path):
    load = ("--rate", "2", "--duration", "10s", "--warmup", "0s", "--input-tokens", "3000")
    _a, alone = virtual_run(tmp_path / "alone", *load)
    _b, shared = virtual_run(tmp_path / "shared", *load, "--shared-prefix-tokens", "2000")
    assert [r["input_tokens"] for r in alone] == [r["input_tokens"] for r in shared]
    assert all(r["cached_tokens"] == 0 for r in alone)
    # the chat header, the lead word and 2000 shared words, in whole KV blocks
    assert {r["cached_tokens"] for r in shared[1:]} == {2002 // BLOCK * BLOCK}
    ttft = [np.median([r["ttft_s"] for r in run]) for run in (alone, shared)]
    assert ttft[1] < 0.6 * ttft[0]
    start = json.loads((tmp_path / "shared" / "run.json").read_text())["phases"][0]["start_at"]
    requests = [
        twin.Request(r["intended_at"] - start, 3000, r["output_tokens"], prefix=(("s", 2002),))
        for r in shared
    ]
    timings = twin.run(presets.load(PRESET), requests).timings
    assert [r["ttft_s"] for r in shared] == pytest.approx([t.ttft for t in timings], rel=1e-4)


def test_dataset_prompts_are_counted_by_the_simulators_rule(tmp_path: Path):
    dataset = tmp_path / "prompts.jsonl"
    words = {10: 5, 200: 40, 900: 7}  # prompt words: tokens to generate
    dataset.write_text(
        "".join(
            json.dumps({"prompt": " ".join(["w"] * n), "max_tokens": m}) + "\n"
            for n, m in words.items()
        )
    )
    load = ("--rate", "3", "--duration", "10s", "--warmup", "0s", "--dataset", str(dataset))
    _summary, records = virtual_run(tmp_path / "chat", *load)
    # chat: the user's role header, its words, the generation prompt
    assert {(r["input_tokens"], r["output_tokens"]) for r in records} == {
        (n + 2, m) for n, m in words.items()
    }
    _summary, records = virtual_run(tmp_path / "text", *load, "--endpoint", "completions")
    assert {(r["input_tokens"], r["output_tokens"]) for r in records} == set(words.items())


def test_a_dataset_prompt_past_the_context_is_one_line(tmp_path: Path, capsys):
    dataset = tmp_path / "long.jsonl"
    dataset.write_text(json.dumps({"prompt": " ".join(["w"] * 9000)}) + "\n")
    out = tmp_path / "run"
    code = main(["--target", TARGET, "--out", str(out), "--rate", "1", "--dataset", str(dataset)])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--dataset" in line and "context" in line
    assert not out.exists()


def test_a_traces_shared_blocks_reach_the_twin(tmp_path: Path):
    trace = tmp_path / "mooncake.jsonl"
    rows = [  # 512-token blocks: the second shares two with the first, the third none
        {"timestamp": 0, "input_length": 1536, "output_length": 20, "hash_ids": [1, 2, 3]},
        {"timestamp": 5000, "input_length": 1536, "output_length": 20, "hash_ids": [1, 2, 7]},
        {"timestamp": 10000, "input_length": 1536, "output_length": 20, "hash_ids": [8, 9, 10]},
        {"timestamp": 15000, "input_length": 1536, "output_length": 20, "hash_ids": [1, 2, 3]},
    ]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _summary, records = virtual_run(tmp_path / "run", "--replay", str(trace))
    cached = [r["cached_tokens"] for r in records]
    assert cached[0] == cached[2] == 0
    assert 2 * 512 - 2 * BLOCK <= cached[1] <= 2 * 512  # two blocks, to a KV block
    assert cached[3] == (1536 - 1) // BLOCK * BLOCK  # all of it but the last token's block
    assert records[1]["ttft_s"] < 0.8 * records[2]["ttft_s"]
    assert records[3]["ttft_s"] < 0.2 * records[2]["ttft_s"]


@pytest.mark.parametrize("interval", [1, 4])
def test_records_carry_the_streams_gaps(tmp_path: Path, interval: int):
    load = ("--rate", "4", "--duration", "5s", "--warmup", "0s", "--output-tokens", "30-90")
    args = ("--virtual-args", f"--stream-interval {interval}")
    summary, records = virtual_run(tmp_path / "run", *load, *args)
    for r in records:
        events = 1 + -(-(r["output_tokens"] - 1) // interval)  # the first, then every interval
        assert len(r["itl_s"]) == events - 1
        span = r["tpot_s"] * (r["output_tokens"] - 1)
        assert sum(r["itl_s"]) == pytest.approx(span, rel=1e-9)
        assert r["max_itl_s"] == max(r["itl_s"]) and r["stalls"] == 0
        assert r["ttfnt_s"]["3"] >= r["ttft_s"]
    metrics = summary["targets"][TARGET]["metrics"]
    if interval == 1:  # one token an event: the mean gap is TPOT
        gaps = [g for r in records for g in r["itl_s"]]
        weights = [r["tpot_s"] for r in records for _g in r["itl_s"]]
        assert np.mean(gaps) == pytest.approx(np.mean(weights), rel=1e-9)
    assert metrics["itl_s"]["p50"] is not None


def test_slices_of_a_virtual_run(tmp_path: Path):
    load = ("--rate", "5", "--duration", "12s", "--warmup", "0s", "--slice", "3s")
    summary, records = virtual_run(tmp_path / "run", *load)
    slices = summary["targets"][TARGET]["slices"]
    assert len(slices) >= 4
    assert sum(s["sent"] for s in slices) == len(records)
    assert sum(s["finished"] for s in slices) == len(records)
    assert all(s["ttft_s"]["count"] and s["output_tokens_per_s"] > 0 for s in slices[:4])


def test_a_replayed_prompt_past_the_context_is_answered_400_and_the_run_goes_on(tmp_path: Path):
    """vLLM refuses a request whose prompt and max_tokens pass max_model_len with a 400 and
    serves the next: the twin does the same, where the whole run used to stop."""
    limit = presets.load(PRESET).max_model_len
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 500, "output_length": 20},
        {"timestamp": 1000, "input_length": limit, "output_length": 20},  # too long
        {"timestamp": 2000, "input_length": 500, "output_length": 20},
    ]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary, records = virtual_run(tmp_path / "run", "--replay", str(trace))
    assert [r["replay_index"] for r in records] == [1, 2, 3]
    assert [r["status"] for r in records] == [200, 400, 200]
    assert len({r["request_id"] for r in records}) == 3
    refused = records[1]
    assert not refused["ok"] and refused["error"] == "http_400" and refused["ttft_s"] is None
    assert refused["intended_at"] - records[0]["intended_at"] == pytest.approx(1.0)
    assert summary["targets"][TARGET]["requests"]["failed"] == 1
