"""What the runner keeps of conversations under way: a --turns conversation's history, and a
replayed trace's call graph with what each awaited call said and was answered on this run,
so that a call continuing another is sent with its parent's messages and answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.replay import sessions
from loadgen.replay.formats import TraceRecord
from loadgen.replay.window import Arrival


class Following:
    """A replayed trace's call graph, and what each awaited call said and was answered on
    this run (kept until the last call that continues it has its prompt)."""

    def __init__(self, tree: sessions.Graph) -> None:
        self.tree = tree
        self._parent = {c.record.line: p for p, kids in tree.children.items() for c in kids}
        self._records = {a.record.line: a.record for a in tree.roots}
        for kids in tree.children.values():
            self._records.update((c.record.line, c.record) for c in kids)
        # each awaited call's messages, answer and prompt tokens on this run, and how many
        # of its followers have yet to take them
        self._said: dict[int, tuple[list[dict[str, Any]], str, int | None, int]] = {}

    def awaited(self, arrival: Arrival) -> bool:
        return arrival.record.line in self.tree.children

    def answered(
        self, arrival: Arrival, body: dict[str, Any], answer: str | None, tokens: int | None
    ) -> None:
        """An awaited call ended, its prompt `tokens` long as the server counted (None: not
        said); answer None: it failed (its followers get prompts of their own)."""
        messages = body.get("messages")
        if answer is not None and isinstance(messages, list):
            line = arrival.record.line
            self._said[line] = (messages, answer, tokens, len(self.tree.children[line]))

    def said(
        self, arrival: Arrival
    ) -> tuple[TraceRecord, list[dict[str, Any]], str, int | None] | None:
        """The parent's record, messages, answer and prompt tokens on this run, for a call
        that continues it."""
        parent = self._parent.get(arrival.record.line)
        kept = self._said.get(parent) if parent is not None else None
        if parent is None or kept is None:
            return None
        messages, answer, tokens, left = kept
        if left > 1:
            self._said[parent] = (messages, answer, tokens, left - 1)
        else:
            del self._said[parent]
        return self._records[parent], messages, answer, tokens


@dataclass(slots=True)
class Talk:
    """A conversation under way: its id and what was said (user and assistant, in turn)."""

    session: str
    history: list[dict[str, Any]] = field(default_factory=list)
