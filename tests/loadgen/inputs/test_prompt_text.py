"""Synthetic prompt text: the lead, then one-token words, and a shared prefix that opens every
prompt and keeps its length."""

from __future__ import annotations

import numpy as np

from loadgen.inputs.prompt_text import LEAD, WORDS, Sizing, shared_prefix, synthetic_text


def test_synthetic_prompt_is_the_lead_and_one_token_words() -> None:
    rng = np.random.default_rng(1)
    sizing = Sizing(words=("a", "b", "c"), overhead=5, source="tokenize")
    text = synthetic_text(512, sizing, rng)
    lead, *words = text.split(" ")
    assert lead == LEAD and len(words) == 512 - 5 and set(words) == {"a", "b", "c"}
    assert synthetic_text(3, sizing, rng) == LEAD  # shorter than the overhead: the lead alone
    starts = {" ".join(synthetic_text(64, sizing, rng).split()[:9]) for _ in range(50)}
    assert len(starts) == 50  # no shared prefix beyond the lead word
    uncalibrated = synthetic_text(100, Sizing(), rng).split()
    assert len(uncalibrated) == 100 and set(uncalibrated) <= set(WORDS)  # one token per word


def test_a_shared_prefix_opens_every_prompt_and_keeps_its_length() -> None:
    sizing = Sizing(overhead=1)
    shared = shared_prefix(20, sizing, np.random.default_rng(3))
    assert len(shared) == 20 and set(shared) <= set(WORDS)
    rng = np.random.default_rng(4)
    texts = [synthetic_text(64, sizing, rng, shared).split() for _ in range(5)]
    assert all(t[1:21] == list(shared) and len(t) == 64 for t in texts)
    assert len({" ".join(t[21:30]) for t in texts}) == 5  # unique after the shared part
    assert synthetic_text(8, sizing, rng, shared).split()[1:] == list(shared[:7])
