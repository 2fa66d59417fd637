"""Calibrating synthetic prompts against a tokenizer, so they hit --input-tokens exactly.

A mean tokens-per-word ratio cannot do that: words cost different numbers of tokens, and a
chat template adds tokens of its own. Instead, keep only the candidate words that are one
token each *in context* (after a space, behind the lead word), then measure the fixed cost of
the request's shape once. `count` is the only I/O: the server's /tokenize in the request's
own shape (prompt or chat messages), or a local tokenizer; it returns None when it cannot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from loadgen.inputs.prompt_text import LEAD, WORDS, Sizing, synthetic_text

Count = Callable[[str], Awaitable[int | None]]
REPEATS = 3  # a word qualifies when REPEATS more of it cost exactly REPEATS tokens
OVERHEAD_WORDS = 32


async def calibrate(count: Count, mean_tokens: float, source: str) -> Sizing | None:
    """The one-token words and the overhead, or None when `count` cannot tell."""
    lead = await count(LEAD)
    if lead is None:
        return None
    probes = await asyncio.gather(*(count(LEAD + f" {word}" * REPEATS) for word in WORDS))
    words = tuple(w for w, n in zip(WORDS, probes, strict=True) if n == lead + REPEATS)
    if not words:
        return None
    run = "".join(f" {words[i % len(words)]}" for i in range(OVERHEAD_WORDS))
    total = await count(LEAD + run)
    if total is None:
        return None
    sizing = Sizing(words, total - OVERHEAD_WORDS, source)
    # one prompt as the run will build them: corrects the overhead should the words not add up
    target = max(round(mean_tokens), sizing.overhead + OVERHEAD_WORDS)
    check = await count(synthetic_text(target, sizing, np.random.default_rng(0)))
    if check is None:
        return None
    return Sizing(words, sizing.overhead + check - target, source)
