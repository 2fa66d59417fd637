"""Accuracy's interval and the compare verdict, against seeded known shares."""

from __future__ import annotations

import random

import pytest

from loadgen.analysis import consistency, quality


def scored(share: float, items: int, rng: random.Random) -> dict:
    block = quality.summarize((f"q{i}", rng.random() < share) for i in range(items))
    assert block is not None
    return block


def test_the_interval_holds_the_true_share_in_at_least_95_of_100_repeats() -> None:
    """Counted over 1,000 seeded repeats per case, so a 95% bound is not a coin toss: 100
    repeats of an interval that covers 97% of the time fall below 95 about once in ten."""
    rng = random.Random(37)
    for share, items in ((0.7, 200), (0.95, 60), (0.3, 40), (0.02, 100)):
        intervals = (scored(share, items, rng)["interval"] for _ in range(1000))
        held = sum(lo <= share <= hi for lo, hi in intervals)
        assert held >= 950, (share, items, held)


def test_wilson_against_worked_figures() -> None:
    # Newcombe (1998), table I, method 4 (score, continuity-corrected)
    assert quality.wilson(81, 263) == pytest.approx((0.2535, 0.3682), abs=1e-4)
    assert quality.wilson(0, 10) == pytest.approx((0.0, 0.3445), abs=1e-4)


def test_an_item_counts_once_correct_when_most_of_its_answers_were() -> None:
    block = quality.summarize([("a", True), ("a", True), ("a", False), ("b", True), ("b", False)])
    assert block is not None
    assert (block["items"], block["correct"], block["answers"]) == (2, 1, 5)
    assert quality.summarize([]) is None


def test_compare_calls_a_20_point_drop_dropped_and_no_change_held_or_cannot_tell() -> None:
    rng = random.Random(1)
    dropped = quality.difference(scored(0.8, 400, rng), scored(0.6, 400, rng), margin=2.0)
    assert dropped.verdict == "dropped" and -26 < dropped.points < -14
    same = quality.difference(scored(0.8, 100, rng), scored(0.8, 100, rng), margin=2.0)
    assert same.verdict == "cannot tell with 100 items"
    assert same.low < 0 < same.high and same.items_needed is not None
    assert 5000 < same.items_needed < 10000  # 2·(1.96+0.84)²·0.16/0.02² ≈ 6,272
    assert "items per side would tell a 2-point drop" in quality.describe(same)
    many = {"items": 100_000, "correct": 80_000, "accuracy": 0.8}
    many["interval"] = list(quality.wilson(80_000, 100_000))
    assert quality.difference(many, many, margin=2.0).verdict == "held"
    better = quality.difference(scored(0.6, 400, rng), scored(0.8, 400, rng), margin=2.0)
    assert better.verdict == "better"


def test_consistency_counts_prompts_and_their_earliest_difference() -> None:
    assert consistency.first_difference(["a", " b"], ["a", " b"]) is None
    assert consistency.first_difference(["a", " b", " c"], ["a", " x", " c"]) == 1
    assert consistency.first_difference(["a", " b"], ["a"]) == 1
    block = consistency.summarize([("p1", None), ("p2", 4), ("p2", 9), ("p3", 2), ("p1", None)])
    assert block == {
        "prompts": 3,
        "identical": 1,
        "share": pytest.approx(1 / 3),
        "first_difference": {"median": 3.0, "min": 2},
    }
    key = b"k" * 32
    assert consistency.keyed_hash(key, "a b") == consistency.keyed_hash(key, "a b")
    assert consistency.keyed_hash(key, "a b") != consistency.keyed_hash(key, "a  b")
    assert consistency.keyed_hash(key, "a") != consistency.keyed_hash(b"j" * 32, "a")
