"""What each request asks for: prompts and lengths, synthetic or from a dataset (dataset.py).

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
sizing.py finds the words and the overhead; the server's own usage counts are what results
report either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.inputs.bounds import MAX_TOKENS, BadValue, count, duration

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

TOKENS = count(1, MAX_TOKENS, "a token count")
PAUSE = duration(positive=False)


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


def _range(text: str | int, parse: Callable[[str], Any], example: str) -> tuple[Any, Any]:
    """`LOW` or `LOW-HIGH`, each end read by `parse`; an end below the start is refused."""
    text = str(text).strip()
    low, sep, high = text.partition("-")
    lo = parse(low)
    hi = parse(high) if sep else lo
    if hi < lo:
        raise BadValue(f"{text!r}: the range's end is below its start (use e.g. {example})")
    return lo, hi


@dataclass(frozen=True, slots=True)
class Lengths:
    """A fixed length (`512`) or a uniform integer range (`256-1024`)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | int) -> Lengths:
        return cls(*_range(text, TOKENS, "256-1024"))

    def draw(self, rng: np.random.Generator) -> int:
        return self.low if self.low == self.high else int(rng.integers(self.low, self.high + 1))

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


@dataclass(frozen=True, slots=True)
class Durations:
    """A fixed duration (`2s`) or a uniform range (`1s-5s`), in seconds."""

    low: float
    high: float

    @classmethod
    def parse(cls, text: str) -> Durations:
        return cls(*_range(text, PAUSE, "1s-5s"))

    def draw(self, rng: np.random.Generator) -> float:
        return self.low if self.low == self.high else float(rng.uniform(self.low, self.high))


NO_THINK = Durations(0.0, 0.0)


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


@dataclass(slots=True)
class Workload:
    """Builds request bodies; one instance per run, drawing from a seeded generator."""

    endpoint: str  # chat | completions
    input_tokens: Lengths
    output_tokens: Lengths
    rng: np.random.Generator
    dataset: list[Prompt] | None = None
    sizing: Sizing = Sizing()
    temperature: float = 0.0
    ignore_eos: bool = True
    prompt_rng: np.random.Generator | None = None  # draws prompt words (None: `rng` does)
    shared: tuple[str, ...] = ()  # the run's shared prefix (shared_prefix)
    turns: int = 1  # requests per conversation (--turns)
    think: Durations = NO_THINK  # a user's pause between turns (--think-time)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def _prompt(self) -> Prompt:
        if self.dataset:
            return self.dataset[int(self.rng.integers(0, len(self.dataset)))]
        words = self.prompt_rng or self.rng
        length = self.input_tokens.draw(self.rng)
        return Prompt(text=synthetic_text(length, self.sizing, words, self.shared))

    def turn(self, model: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        """A conversation's next request: everything said so far, then a new user message."""
        prompt = self._prompt()
        return self.body(model, Prompt(messages=[*history, *user_messages(prompt.as_text())]))

    def body(self, model: str, prompt: Prompt | None = None) -> dict[str, Any]:
        """A request body: for `prompt` when given (a replayed record), else the next one."""
        prompt = prompt or self._prompt()
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": prompt.max_tokens or self.output_tokens.draw(self.rng),
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.endpoint == "chat":
            body["messages"] = prompt.messages or user_messages(prompt.text or "")
        else:
            body["prompt"] = prompt.as_text()
        return body
