"""An agent's capture replayed on the twin (`--target virtual:`): its calls keep their
order on the virtual clock, fan-out siblings run together, and the prefix cache finds what
the chained prompts hold, as often as it did where the capture was taken.

The capture (tests/loadgen/fixtures/agent-capture.jsonl) is the proxy's log of the scripted
agent (tests/support/agent.py) against the simulator with the prefix cache on, taken as
test_agent_replay.py takes it: three sessions of tool loops, fan-outs of three, two
sub-agents, 24 calls; the simulator's prefix-cache hit share was 0.868 there."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.records import Record, RunData
from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.sim.model import presets

CAPTURE = Path(__file__).parents[1] / "fixtures" / "agent-capture.jsonl"
PRESET = "llama-70b-bf16-tp4-a100"  # the capture's simulator
BLOCK = presets.load(PRESET).engine.block_size
EPOCH = 1e-6  # epoch seconds near 2e9 are exact to a few tenths of a microsecond


def calls() -> dict[int, dict[str, Any]]:
    return {n: json.loads(x) for n, x in enumerate(CAPTURE.read_text().splitlines(), 1)}


def replay(out: Path, *flags: str) -> tuple[RunData, dict[str, Record]]:
    argv = ["--target", f"virtual:{PRESET}", "--replay", str(CAPTURE), "--no-progress"]
    assert main([*argv, "--warmup", "0s", *flags, "--out", str(out)]) == 0
    run = rundir.read(out)
    lines = calls()
    return run, {lines[r.replay_index]["request_id"]: r for r in run.records}


def test_calls_wait_for_their_parents_and_find_their_prompts_cached(tmp_path: Path) -> None:
    run, replayed = replay(tmp_path / "run")
    seen = {c["request_id"]: c for c in calls().values()}
    assert replayed.keys() == seen.keys() and all(r.ok for r in replayed.values())
    assert run.meta["replay"]["calls"] == {"sessions": 3, "linked": 19, "unlinked": 0}
    assert run.meta["virtual"] is True
    siblings: dict[str, list[Record]] = defaultdict(list)
    for call_id, r in replayed.items():
        call = seen[call_id]
        assert (r.session, r.turn) == (call["session"], call["turn"])  # the capture's
        parent = call["parent"]
        if parent is None:
            continue
        siblings[parent].append(r)
        before = replayed[parent]
        assert r.sent_at >= before.end_at  # never before its parent's answer ended
        assert r.sent_at == pytest.approx(before.end_at + call["parent_gap_s"], abs=EPOCH)
        # its prompt opens with the parent's prompt and answer: all cached but the block
        # the answer's last token is in (never computed), unless a sibling computed it
        assert before.input_tokens is not None and before.output_tokens is not None
        context = before.input_tokens + before.output_tokens
        assert (context - 1) // BLOCK * BLOCK <= (r.cached_tokens or 0) <= context // BLOCK * BLOCK
        assert r.cached_tokens == call["cached_tokens"]  # as the simulator found it live
    fanned = [kids for kids in siblings.values() if len(kids) > 1]
    assert len(fanned) == 3  # one fan-out of three per session
    for kids in fanned:  # in parallel: each still running when the last one starts
        assert max(k.sent_at for k in kids) < min(k.end_at for k in kids)
    share = sum(r.cached_tokens or 0 for r in run.records) / sum(
        r.input_tokens or 0 for r in run.records
    )
    captured = sum(c["cached_tokens"] for c in seen.values()) / sum(
        c["input_tokens"] for c in seen.values()
    )
    assert captured > 0.8
    assert share == pytest.approx(captured, rel=0.1)


def test_speed_and_gap_scale_move_starts_and_gaps_but_never_the_order(tmp_path: Path) -> None:
    _run, replayed = replay(tmp_path / "fast", "--replay-speed", "8", "--gap-scale", "0")
    seen = {c["request_id"]: c for c in calls().values()}
    first = min(seen.values(), key=lambda c: c["arrived_at"])
    start = min(r.sent_at for r in replayed.values())
    for call_id, r in replayed.items():
        call = seen[call_id]
        if call["parent"] is None:  # a root at its recorded offset, 8 times as fast
            offset = (call["arrived_at"] - first["arrived_at"]) / 8
            assert r.sent_at - start == pytest.approx(offset, abs=EPOCH)
        else:  # the moment its parent's answer ended
            assert r.sent_at == pytest.approx(replayed[call["parent"]].end_at, abs=EPOCH)


def test_a_call_is_in_the_warm_up_when_its_sessions_first_call_is(tmp_path: Path) -> None:
    """The three sessions start at once, inside 4 s of warm-up: every call that follows
    them is warm-up too, however late; the two sub-agents, sent after 4 s, are measured."""
    _run, replayed = replay(tmp_path / "warm", "--warmup", "4s")
    seen = {c["request_id"]: c for c in calls().values()}
    start = min(r.sent_at for r in replayed.values())
    measured = {k for k, r in replayed.items() if r.excluded is None}
    assert measured == {k for k, c in seen.items() if c["parent"] is None and c["turn"] == 1
                        and replayed[k].sent_at - start >= 4.0}  # fmt: skip
    assert measured == {"agent-a-9", "agent-b-8"}
    late = [r for k, r in replayed.items() if k not in measured and r.sent_at - start >= 4.0]
    assert late and all(r.excluded == "warmup" for r in late)


def test_the_virtual_clock_gives_the_same_replay_twice(tmp_path: Path) -> None:
    _a, one = replay(tmp_path / "a")
    _b, two = replay(tmp_path / "b")
    start = [min(r.sent_at for r in run.values()) for run in (one, two)]
    for call_id, r in one.items():
        other = two[call_id]
        assert r.sent_at - start[0] == pytest.approx(other.sent_at - start[1], abs=EPOCH)
        assert (r.ttft_s, r.cached_tokens) == (other.ttft_s, other.cached_tokens)
