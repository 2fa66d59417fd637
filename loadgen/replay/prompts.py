"""Prompt text for replayed records: sized as synthetic prompts are, shared where the trace
says its prompts were.

A record without a prefix gets a fresh synthetic prompt of its length. A record with one
(Mooncake's hash_ids, the proxy's per-message prefix hashes) is built part by part, and a
part named before is the same words again, so a server's prefix cache finds what the
trace's did. Blocks are `block_tokens` long (the first one less the prompt's fixed overhead,
so that block k ends at token (k+1)·block_tokens; the last one is the rest). Messages have no
recorded length: a new one gets an even share of the tokens the known parts leave.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loadgen.replay.formats import TraceRecord
from loadgen.workload import LEAD, Prompt, Sizing, synthetic_text

DEFAULT_BLOCK_TOKENS = 512  # Mooncake's published traces


@dataclass(slots=True)
class PromptBook:
    sizing: Sizing
    rng: np.random.Generator
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    _parts: dict[str, list[str]] = field(default_factory=dict)

    def prompt(self, record: TraceRecord) -> Prompt:
        """The record's prompt, asking for exactly its recorded output (ignore_eos does it)."""
        return Prompt(text=self.text(record), max_tokens=record.output_tokens)

    def text(self, record: TraceRecord) -> str:
        words = max(0, record.input_tokens - self.sizing.overhead)
        if not record.prefix:
            return synthetic_text(record.input_tokens, self.sizing, self.rng)
        lengths = (
            self._block_lengths(words, len(record.prefix))
            if record.prefix_unit == "block"
            else self._message_lengths(words, record)
        )
        picked: list[str] = []
        for key, n in zip(record.prefix, lengths, strict=False):
            picked += self._part(f"{record.prefix_unit}:{key}", n)
        picked += self._fresh(words - len(picked))  # past the named parts
        return LEAD + "".join(" " + w for w in picked[:words])

    def _block_lengths(self, words: int, blocks: int) -> list[int]:
        first = max(0, self.block_tokens - self.sizing.overhead)
        lengths = [first] + [self.block_tokens] * (blocks - 1)
        out, left = [], words
        for n in lengths:
            out.append(min(n, left))
            left -= out[-1]
        return out

    def _message_lengths(self, words: int, record: TraceRecord) -> list[int]:
        keys = [f"message:{k}" for k in record.prefix]
        known = sum(len(self._parts[k]) for k in keys if k in self._parts)
        new = sum(1 for k in keys if k not in self._parts)
        each = max(1, (words - known) // new) if new else 0
        return [len(self._parts[k]) if k in self._parts else each for k in keys]

    def _part(self, key: str, n: int) -> list[str]:
        part = self._parts.setdefault(key, [])
        if len(part) < n:
            part += self._fresh(n - len(part))
        return part[:n]

    def _fresh(self, n: int) -> list[str]:
        words = self.sizing.words
        return [words[i] for i in self.rng.integers(0, len(words), size=max(0, n))]
