"""The text prompts are made of, synthetic or replayed, and a prompt as a request carries it.

Synthetic prompts are additive in tokens: a fixed lead word, then words drawn at random from
those that are exactly one token each in the target's tokenizer, so a prompt of n words costs
`overhead + n` tokens, where the overhead (chat template, BOS, the lead word) is the same for
every request. Random words make every prompt unique from its first few words on, so a
server's prefix cache cannot turn one prompt into a cheap repeat of another; and the words come
from a generator of their own, seeded afresh for every run (run.json `meta.prompts.seed`;
`--prompt-seed` repeats a run's prompts on purpose), so an earlier run of the same command
cannot have warmed the cache either, while `--seed` still repeats lengths and arrivals. A
shared prefix (`--shared-prefix-tokens N`: N words drawn once per run, after the lead word of
every prompt) stands for a system prompt, to measure what a server's prefix cache buys.
engine/sizing.py finds the words and the overhead; the server's own usage counts are what
results report either way. Replayed prompts (replay/prompts.py) are made of the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Candidates for one-token words: common English, so most tokenizers have each as one token.
# fmt: off
WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as",
    "by", "at", "from", "his", "her", "this", "which", "are", "be", "or", "an", "it",
    "not", "have", "had", "were", "has", "their", "they", "one", "all", "been", "more", "would",
    "when", "there", "other", "some", "time", "into", "only", "its", "new", "two", "first", "after",
    "also", "many", "most", "over", "such", "made", "years", "may", "where", "used",
    "about", "back", "because", "before", "between", "both", "can", "could", "day", "down",
    "each", "even", "get", "good", "great", "here", "how", "just", "know", "last", "life",
    "like", "long", "make", "much", "must", "never", "now", "number", "old", "our", "out",
    "own", "part", "people", "per", "place", "point", "right", "said", "same", "second", "see",
    "should", "since", "small", "still", "than", "then", "these", "three", "through", "under",
    "very", "way", "well", "what", "while", "who", "will", "work", "world", "year", "you",
)
# fmt: on
LEAD = WORDS[0]  # every prompt starts with it: its cost, whatever it is, is part of the overhead


@dataclass(frozen=True, slots=True)
class Sizing:
    """How synthetic prompts are sized: `overhead + n` tokens for n words after the lead.

    source says what measured it: the server's /tokenize, a local tokenizer file, or nothing
    (`none`: one token per word assumed, no overhead beyond the lead word).
    """

    words: tuple[str, ...] = WORDS
    overhead: int = 1
    source: str = "none"

    def meta(self) -> dict[str, Any]:
        return {"source": self.source, "overhead": self.overhead, "words": len(self.words)}


def synthetic_text(
    tokens: int, sizing: Sizing, rng: np.random.Generator, shared: tuple[str, ...] = ()
) -> str:
    """The lead word, the shared prefix (as much of it as fits), then enough random one-token
    words to make `tokens` tokens in all."""
    words = max(0, tokens - sizing.overhead)
    prefix = shared[:words]
    picks = rng.integers(0, len(sizing.words), size=words - len(prefix))
    return LEAD + "".join(" " + w for w in prefix) + "".join(" " + sizing.words[i] for i in picks)


def shared_prefix(tokens: int, sizing: Sizing, rng: np.random.Generator) -> tuple[str, ...]:
    """`tokens` one-token words every prompt of a run opens with (after the lead word)."""
    return tuple(sizing.words[i] for i in rng.integers(0, len(sizing.words), size=tokens))


def user_messages(text: str) -> list[dict[str, Any]]:
    """A chat request's messages for a plain-text prompt (and what calibration counts)."""
    return [{"role": "user", "content": text}]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: plain text (completions) or chat messages; output length to ask for."""

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None

    def as_text(self) -> str:
        """Its text, or its messages' contents one a line (a completion's prompt, a turn's)."""
        if self.text is not None:
            return self.text
        return "\n".join(str(m.get("content", "")) for m in self.messages or [])
