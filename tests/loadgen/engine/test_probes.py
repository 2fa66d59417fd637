"""Which requests are checked ones: eval items spread evenly in file order, consistency
prompts once the measured window opens, and verdicts without the text."""

from __future__ import annotations

import asyncio

from loadgen.analysis import evals
from loadgen.analysis.records import Record
from loadgen.engine.probes import CHAT, Probes


def record(target: str = "a") -> Record:
    return Record(
        request_id="r", target=target, intended_at=0, sent_at=0, end_at=0, send_lag_s=0, ok=True
    )


def test_a_quarter_of_the_requests_are_items_in_file_order_for_every_target() -> None:
    items = evals.canaries("copy", seed=1, count=3)
    probes = Probes(items, 0.25, [], "chat")
    for target in ("a", "b"):
        taken = [probes.take(target, "m", measured=False) for _ in range(12)]
        sent = [p.item.id for p in taken if p is not None]
        assert [i for i, p in enumerate(taken) if p is not None] == [3, 7, 11]
        assert sent == ["copy-0", "copy-1", "copy-2"]
    probe = taken[3]
    assert probe is not None and probe.path == CHAT
    assert probe.body["temperature"] == 0 and "ignore_eos" not in probe.body


def test_consistency_prompts_go_again_once_measured_and_keep_only_a_hash() -> None:
    prompts = [("/v1/completions", {"prompt": f"fixed {i}", "max_tokens": 4}) for i in range(2)]
    probes = Probes([], 1.0, prompts, "completions")

    async def alone(target: str, path: str, body: dict) -> tuple[Record, str]:
        return record(target), f"answer to {body['prompt']}"

    asyncio.run(probes.take_references({"a": "m"}, alone))
    assert probes.take("a", "m", measured=False) is None  # warm-up: ordinary load
    first, second = (probes.take("a", "m", measured=True) for _ in range(2))
    assert probes.take("a", "m", measured=True) is None  # each prompt once
    same, other = record(), record()
    probes.judge(first, same, "answer to fixed 0")
    probes.judge(second, other, "answer to fixed one")
    assert (same.consistency_id, same.first_difference, same.content) == ("0", None, None)
    assert other.first_difference == 3 and len(other.output_hash) == 32
    assert "fixed" not in repr(other.output_hash)
