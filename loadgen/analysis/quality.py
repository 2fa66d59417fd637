"""Accuracy under load and whether it changed: Wilson intervals and a verdict in words. Pure.

An item sent several times counts once: greedy answers to one prompt carry no new
information, so repeats would narrow the interval without reason. An item is correct when
more than half of its answers were.

Accuracy's 95% interval is Wilson's score interval with continuity correction (Newcombe
1998, method 4): it keeps at least its nominal coverage near 0% and 100% and at a few dozen
items, where the normal approximation's (and plain Wilson's, ~93% at some sizes) does not.
The difference of two accuracies gets Newcombe's hybrid score interval built from the two
(his method 11). The verdict, against a margin of practical equivalence in points:
- held: the whole interval lies within ±margin;
- dropped / better: the whole interval lies below / above zero;
- cannot tell with N items: neither; with the items per side that would tell a drop of
  DETECTABLE_DROP points (95% confidence, 80% power, at the measured accuracy).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Z95 = 1.959964  # two-sided 95%
Z80 = 0.841621  # one-sided 80% power
DETECTABLE_DROP = 2.0  # points: the drop "items needed" is sized for


def wilson(correct: float, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a share `correct / n` (n > 0), continuity-corrected."""
    p, z2 = correct / n, Z95 * Z95
    denominator = 2 * (n + z2)
    low = 0.0
    if p > 0:
        root = math.sqrt(max(0.0, z2 - 2 - 1 / n + 4 * p * (n * (1 - p) + 1)))
        low = max(0.0, (2 * n * p + z2 - 1 - Z95 * root) / denominator)
    high = 1.0
    if p < 1:
        root = math.sqrt(max(0.0, z2 + 2 - 1 / n + 4 * p * (n * (1 - p) - 1)))
        high = min(1.0, (2 * n * p + z2 + 1 + Z95 * root) / denominator)
    return low, high


def summarize(
    outcomes: Iterable[tuple[str, bool]], timed_out: int = 0
) -> dict[str, Any] | None:
    """targets.<name>.quality from (item id, correct) per scored answer, and the count of
    answers left unjudged because their item's regex was cut off; None without a judged one."""
    answers: dict[str, list[bool]] = defaultdict(list)
    for item_id, correct in outcomes:
        answers[item_id].append(correct)
    if not answers:
        return None
    items = len(answers)
    right = sum(1 for marks in answers.values() if sum(marks) * 2 > len(marks))
    lo, hi = wilson(right, items)
    return {
        "items": items,
        "correct": right,
        "accuracy": right / items,
        "interval": [lo, hi],
        "answers": sum(len(marks) for marks in answers.values()),
        "timed_out": timed_out,
    }


@dataclass(frozen=True, slots=True)
class Difference:
    """Accuracy of `other` minus the baseline's, in percentage points."""

    points: float
    low: float
    high: float
    verdict: str  # held | dropped | better | cannot tell with N items
    items_needed: int | None  # per side, to tell a DETECTABLE_DROP (when it cannot tell)

    @property
    def beyond_margin(self) -> bool:
        return self.verdict != "held"


def difference(base: dict[str, Any], other: dict[str, Any], margin: float) -> Difference:
    """Compare two quality blocks (summarize's); `margin` in points."""
    p1, (l1, u1) = base["accuracy"], base["interval"]
    p2, (l2, u2) = other["accuracy"], other["interval"]
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    points, low, high = 100 * d, 100 * low, 100 * high
    if -margin <= low and high <= margin:
        return Difference(points, low, high, "held", None)
    if high < 0:
        return Difference(points, low, high, "dropped", None)
    if low > 0:
        return Difference(points, low, high, "better", None)
    n = min(base["items"], other["items"])
    needed = items_to_tell((p1 + p2) / 2, DETECTABLE_DROP)
    return Difference(points, low, high, f"cannot tell with {n} items", needed)


def items_to_tell(accuracy: float, drop_points: float) -> int:
    """Items per side for a drop of `drop_points` from `accuracy` to show at 95% confidence
    with 80% power; the accuracy is kept off 0 and 1, where one sample says too little."""
    p = min(0.95, max(0.05, accuracy))
    delta = drop_points / 100
    return math.ceil((Z95 + Z80) ** 2 * 2 * p * (1 - p) / (delta * delta))


def describe(diff: Difference, drop_points: float = DETECTABLE_DROP) -> str:
    """The difference and its verdict in one line of words."""
    text = f"{diff.points:+.1f} points (95% CI {diff.low:+.1f} to {diff.high:+.1f})"
    text += f": {diff.verdict}"
    if diff.items_needed is not None:
        text += f"; about {diff.items_needed} items per side would tell a {drop_points:g}-point"
        text += " drop"
    return text
