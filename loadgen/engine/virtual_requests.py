"""The workload as the twin's requests (sim/twin/deployment.py): each prompt's length, its
answer's, and what its context shares with other requests' (the twin's named prefix parts).

Lengths are counted by the simulator's own rule (sim/model/tokenizer.py), as a real run against
the simulator would find them: a synthetic prompt of N tokens is N tokens (a real run sizes
its words to the rule), a dataset prompt is its count in the request's shape (chat messages
or completion text). Every synthetic prompt opens with the same template header and lead
word, then `--shared-prefix-tokens` shared words: that opening is one part all requests
share. A conversation (`--turns`) sends its history again: turn k's prompt is every earlier
turn's prompt and answer, then its new message (exact under the simulator's rule, where an
answer's role header stands where its generation prompt stood), named by the conversation,
so it finds what the turn before left in the prefix cache, that turn's answer included.

A replay keeps an agent trace's call graph (replay/sessions.py): a call that continues
another waits on it in the twin (its parent) and arrives its recorded gap, times
--gap-scale, after that call's answer ended on the virtual clock, as a live replay sends it.
Its context is the one a live replay's prompt has (replay/prompts.py's follow_up): its
parent's whole context, the parent's answer included, then its own new tokens; a call that
waits on none opens with its trace's shared parts (the prefix blocks, hash ids) and is due
at its own offset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from loadgen.engine.workload import NO_THINK, Durations, Lengths
from loadgen.inputs.prompt_text import LEAD, Prompt, Sizing, user_messages
from loadgen.replay import Arrival, PromptBook, sessions
from loadgen.sim import twin
from loadgen.sim.model.tokenizer import SIMPLE

SHARED = "shared"  # the part every synthetic prompt opens with


def count(prompt: Prompt, endpoint: str, turns: int = 1) -> int:
    """A prompt's tokens as the simulator counts the request that sends it (alone, or as a
    conversation's new message)."""
    if endpoint == "chat":
        message = prompt.messages if prompt.messages and turns == 1 else None
        return len(SIMPLE.chat(message or user_messages(prompt.as_text())))
    return len(SIMPLE.prompt(prompt.as_text()))


@cache  # a run asks the same for every request
def opening(endpoint: str, words: int) -> int:
    """The tokens a prompt opens with up to `words` words after its lead word: the chat
    template's header, the lead, the words (the generation prompt comes at the end)."""
    text = " ".join([LEAD] * (words + 1))
    if endpoint == "chat":
        return len(SIMPLE.chat(user_messages(text), generation_prompt=False))
    return len(SIMPLE.prompt(text))


def sizing(endpoint: str) -> Sizing:
    """Synthetic prompts' sizing against the simulator's rule: what calibration would find."""
    return Sizing(overhead=count(Prompt(text=LEAD), endpoint), source="simulator")


@dataclass(slots=True)
class Planned:
    """The twin's requests and, for each, its record's conversation and turn."""

    requests: list[twin.Request] = field(default_factory=list)
    labels: list[tuple[str | None, int | None]] = field(default_factory=list)
    # a replay's: a call is in the warm-up exactly when the call it waits on is (its
    # session's first call), as a live replay keeps its sessions whole
    warm_by_session: bool = False

    def add(
        self, request: twin.Request, session: str | None = None, turn: int | None = None
    ) -> None:
        self.requests.append(request)
        self.labels.append((session, turn))

    def only(self, kept: Sequence[int]) -> Planned:
        """The requests at `kept` (increasing), each parent renumbered; one whose parent is
        left out waits on none and is due at its own arrival."""
        at = {old: new for new, old in enumerate(kept)}
        requests = []
        for i in kept:
            r = self.requests[i]
            if r.parent is not None:
                r = dataclasses.replace(r, parent=at.get(r.parent))
            requests.append(r)
        return Planned(requests, [self.labels[i] for i in kept], self.warm_by_session)

    def warm(self, arrivals: Sequence[float], warmup_s: float) -> list[bool]:
        """Whether each request (arriving at `arrivals`) is in the warm-up."""
        out: list[bool] = []
        for r, at in zip(self.requests, arrivals, strict=True):
            parent = r.parent if self.warm_by_session else None
            out.append(at < warmup_s if parent is None else out[parent])
        return out


@dataclass(slots=True)
class Prompts:
    """How one request's prompt and answer are drawn, as the real workload draws them."""

    endpoint: str
    inputs: Lengths
    outputs: Lengths
    dataset: Sequence[Prompt] | None = None
    shared_words: int = 0  # --shared-prefix-tokens
    turns: int = 1
    think: Durations = NO_THINK
    _counted: dict[int, int] = field(default_factory=dict)  # dataset index: tokens

    def source(self) -> str:
        """Where the lengths come from, as the command line said it."""
        if self.turns > 1:
            return f"--turns {self.turns}"
        return "--dataset" if self.dataset else "--input-tokens/--output-tokens"

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        """A new prompt's tokens and its answer's."""
        if not self.dataset:
            return self.inputs.draw(rng), self.outputs.draw(rng)
        i = int(rng.integers(0, len(self.dataset)))
        prompt = self.dataset[i]
        if i not in self._counted:
            self._counted[i] = count(prompt, self.endpoint, self.turns)
        return self._counted[i], prompt.max_tokens or self.outputs.draw(rng)

    def _shared(self, prompt: int) -> tuple[tuple[str, int], ...]:
        if not self.shared_words:
            return ()
        return ((SHARED, min(prompt, opening(self.endpoint, self.shared_words))),)

    def one(self, planned: Planned, at: float, rng: np.random.Generator) -> None:
        """A single request due `at`."""
        prompt, output = self.draw(rng)
        planned.add(twin.Request(at, prompt, output, prefix=self._shared(prompt)))

    def conversation(
        self,
        planned: Planned,
        name: str,
        at: float,
        rng: np.random.Generator,
        after: int | None = None,
    ) -> int:
        """A conversation of `turns` requests, its first due `at` (or as request `after`
        ends: a closed-loop stream runs its conversations one after another), each later
        one a think time after the answer before; the index of its last request."""
        parts: tuple[tuple[str, int], ...] = ()
        history = 0
        parent = after
        for turn in range(1, self.turns + 1):
            think = self.think.draw(rng) if turn > 1 else 0.0
            prompt, output = self.draw(rng)
            own = prompt + output
            if turn == 1:
                parts = self._shared(prompt)
                own -= sum(n for _name, n in parts)
            if self.turns > 1:  # named, so the next turn finds it
                parts += ((f"{name}:{turn}", own),)
            request = twin.Request(at, history + prompt, output, parts, parent, think)
            planned.add(request, *((name, turn) if self.turns > 1 else ()))
            history += prompt + output
            parent = len(planned.requests) - 1
        return len(planned.requests) - 1


def replayed(
    trace: Sequence[Arrival], book: PromptBook, endpoint: str, gap_scale: float = 1.0
) -> Planned:
    """A replay's window: each record's lengths, the parts its context shares, and the call
    it waits on, with its session and turn for its record."""
    tree = sessions.graph(trace)
    parent_of = {c.record.line: p for p, kids in tree.children.items() for c in kids}
    lead = opening(endpoint, 0)
    index: dict[int, int] = {}  # a record's line: its request's index
    context: dict[int, tuple[tuple[str, int], ...]] = {}  # an awaited call's, answer included
    planned = Planned(warm_by_session=True)
    for a in trace:
        record, line = a.record, a.record.line
        parent = parent_of.get(line)
        if parent is not None:
            parts = context[parent]
        else:
            named = enumerate(book.parts(record))
            parts = tuple((name, words + lead * (i == 0)) for i, (name, words) in named)
        if line in tree.children:  # its own tokens and its answer: what its followers repeat
            own = max(0, record.input_tokens - sum(n for _name, n in parts))
            parts = (*parts, (f"own:{line}", own), (f"answer:{line}", record.output_tokens))
            context[line] = parts
        request = twin.Request(a.offset_s, record.input_tokens, record.output_tokens, parts)
        if parent is not None:
            gap = (record.gap_s or 0.0) * gap_scale
            request = dataclasses.replace(request, parent=index[parent], gap_s=gap)
        index[line] = len(planned.requests)
        planned.add(request, record.session, record.turn)
    return planned
