"""What each request asks for: prompts and lengths, synthetic (inputs/prompt_text.py) or from
a dataset (dataset.py); sizing.py finds the words and the overhead of synthetic ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.inputs.bounds import MAX_TOKENS, BadValue, count, duration
from loadgen.inputs.prompt_text import Prompt, Sizing, synthetic_text, user_messages

TOKENS = count(1, MAX_TOKENS, "a token count")
PAUSE = duration(positive=False)


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


@dataclass(slots=True)
class Workload:
    """Builds request bodies; one instance per run, drawing from a seeded generator."""

    endpoint: str  # chat | completions
    input_tokens: Lengths
    output_tokens: Lengths
    rng: np.random.Generator
    dataset: list[Prompt] | None = None
    sizing: Sizing = field(default_factory=Sizing)
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
