"""Whether greedy answers stay the same under load: outputs compared word by word. Pure.

A prompt's reference is its answer sent alone (concurrency 1); under load it is sent again
and each answer compared with the reference. Outputs are content: they are compared in
memory, and what is kept is a keyed hash (equal outputs, equal hashes, within one run; the
key is never written, so a hash cannot be checked against a guessed text) and the position
of the first word that differs (whitespace-separated: a client sees text, not token ids).
"""

from __future__ import annotations

import hashlib
import hmac
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any


def keyed_hash(key: bytes, text: str) -> str:
    """A short HMAC-SHA256 of an output under the run's secret key."""
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32]


def first_difference(reference: Sequence[str], output: Sequence[str]) -> int | None:
    """The first position where two word lists differ; None when they are identical."""
    for position, (a, b) in enumerate(zip(reference, output, strict=False)):
        if a != b:
            return position
    return None if len(reference) == len(output) else min(len(reference), len(output))


def summarize(outcomes: Iterable[tuple[str, int | None]]) -> dict[str, Any] | None:
    """targets.<name>.consistency from (prompt id, first difference or None) per answer under
    load: a prompt is identical when every answer was; its first difference is its earliest."""
    positions: dict[str, list[int]] = defaultdict(list)
    prompts: set[str] = set()
    for prompt_id, position in outcomes:
        prompts.add(prompt_id)
        if position is not None:
            positions[prompt_id].append(position)
    if not prompts:
        return None
    firsts = [min(p) for p in positions.values()]
    identical = len(prompts) - len(firsts)
    return {
        "prompts": len(prompts),
        "identical": identical,
        "share": identical / len(prompts),
        "first_difference": (
            {"median": statistics.median(firsts), "min": min(firsts)} if firsts else None
        ),
    }
