"""--turns against loadgen.sim: each turn resends the conversation so far, the model's actual
answers included, after the think time; records carry session and turn; the prefix cache
sees the conversation grow, and finds the answers in it."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.engine.workload import Durations
from loadgen.runs import rundir
from loadgen.stack.processes import simulator
from tests.loadgen.engine.test_prompt_cache import hits


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    preset = ("--preset", "llama-70b-bf16-tp4-a100")
    with simulator(*preset, "--enable-prompt-tokens-details") as url:
        yield url


def conversations(data: rundir.RunData) -> dict[str, list]:
    found = defaultdict(list)
    for record in sorted(data.records, key=lambda r: r.intended_at):
        found[record.session].append(record)
    return found


@pytest.mark.parametrize("load", [["--concurrency", "2"], ["--rate", "4"]])
def test_each_turn_resends_the_conversation_with_its_answers(
    sim: str, tmp_path: Path, load: list[str]
) -> None:
    before = hits(sim)
    argv = ["--target", sim, *load, "--requests", "12", "--turns", "3", "--warmup", "0s"]
    argv += ["--think-time", "50ms-150ms", "--input-tokens", "64", "--output-tokens", "3-12"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--no-progress", "--seed", "5"]) == 0
    data = rundir.read(tmp_path / "run")
    sessions = conversations(data)
    grown = set()
    complete = 0
    for records in sessions.values():
        assert [r.turn for r in records] == list(range(1, len(records) + 1))
        complete += len(records) == 3
        # a cooldown turn in flight when the block ended was cut: a record, no answer
        answered = [r for r in records if r.ok]
        assert all(r.excluded == "cooldown" for r in records if not r.ok)
        for before_, after in itertools.pairwise(answered):
            # the whole conversation again: what was sent, what the model said, a new question
            grown.add(after.input_tokens - before_.input_tokens - before_.output_tokens)
            assert after.intended_at >= before_.end_at + 0.05 - 1e-3  # the think time
            assert after.intended_at <= before_.end_at + 0.15 + 0.05
            # all of it cached, the answer too (as vLLM V1 does), but the block its last
            # token is in: what a virtual run predicts
            context = before_.input_tokens + before_.output_tokens - 1
            assert after.cached_tokens == context // 16 * 16
    assert complete >= 2
    assert len(grown) == 1 and grown.pop() > 0  # the same new-question size every turn
    # later turns find the conversation so far in the prefix cache
    assert hits(sim) - before >= 16 * sum(len(r) - 1 for r in sessions.values())


def test_think_time_parses_like_the_length_flags() -> None:
    assert Durations.parse("2s") == Durations(2.0, 2.0)
    assert Durations.parse("500ms-1.5s") == Durations(0.5, 1.5)
    with pytest.raises(ValueError):
        Durations.parse("3s-1s")


def test_turns_are_for_chat_and_not_for_a_replay(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--turns", "2", "--endpoint", "completions"])
    assert "conversations are chat requests" in capsys.readouterr().err
