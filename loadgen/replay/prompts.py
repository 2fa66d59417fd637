"""Prompt text for replayed records: sized as synthetic prompts are, shared where the trace
says its prompts were.

A record without a prefix gets a fresh synthetic prompt of its length. A record with one
(Mooncake's hash_ids, the proxy's per-message prefix hashes) is built part by part, and a
part named before is the same words again, so a server's prefix cache finds what the
trace's did. Blocks are `block_tokens` long (the first one less the prompt's fixed overhead,
so that block k ends at token (k+1)·block_tokens; the last one is the rest). Messages have no
recorded length: a new one gets an even share of the tokens the known parts leave. The
proxy's character blocks get the prompt's tokens in proportion to their characters, each
block's length fixed by its first use.

An agent's call that continues a call replayed in this run (`follow_up`) is that call's
messages, the answer it got on this run, and then new words for the rest of its recorded
length: as an agent's next prompt is its last one grown by the answer and the tool's
result, so the server's prefix cache finds what it found in the capture.

All text is drawn from the run's prompt seed and the names alone (a part's name, a
record's line), never from a stream shared by the records: a shard that holds every Nth
record writes each record's prompt exactly as a single client would, so blocks shared across
shards stay shared, and records no prefix ties together share no words by accident.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latency_proxy.measure.conversation import BLOCK_CHARS
from loadgen.inputs.prompt_text import LEAD, Prompt, Sizing, synthetic_text
from loadgen.replay.formats import TraceRecord

DEFAULT_BLOCK_TOKENS = 512  # Mooncake's published traces
_CHUNK_WORDS = 256  # a part's words come in chunks, each its own draw, so growing one is stable


@dataclass(slots=True)
class PromptBook:
    sizing: Sizing
    seed: int
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    _parts: dict[str, list[str]] = field(default_factory=dict)  # each part's words drawn so far
    _known: dict[str, int] = field(default_factory=dict)  # each part's length: its longest use

    def prompt(self, record: TraceRecord) -> Prompt:
        """The record's prompt, asking for exactly its recorded output (ignore_eos does it)."""
        return Prompt(text=self.text(record), max_tokens=record.output_tokens)

    def text(self, record: TraceRecord) -> str:
        words = max(0, record.input_tokens - self.sizing.overhead)
        if not record.prefix:
            rng = np.random.default_rng([self.seed, 0, record.line])
            return synthetic_text(record.input_tokens, self.sizing, rng)
        picked: list[str] = []
        for name, n in self.parts(record):
            picked += self._part(name, n)
        picked += self._words(f"after:{record.line}", words - len(picked))  # past the named parts
        return LEAD + "".join(" " + w for w in picked)

    def parts(self, record: TraceRecord) -> list[tuple[str, int]]:
        """The record's named parts in its prompt, each (name, words after the lead), cut where
        the prompt ends; what follows them is the record's own. A virtual run shares by them."""
        words = max(0, record.input_tokens - self.sizing.overhead)
        if record.prefix_unit == "block":
            lengths = self._block_lengths(words, len(record.prefix))
        elif record.prefix_unit == "chars":
            lengths = self._char_lengths(words, record)
        else:
            lengths = self._message_lengths(words, record)
        out, left = [], words
        for key, n in zip(record.prefix, lengths, strict=False):
            name = f"{record.prefix_unit}:{key}"
            self._known[name] = max(self._known.get(name, 0), n)
            out.append((name, min(n, left)))
            left -= out[-1][1]
        return out

    def _block_lengths(self, words: int, blocks: int) -> list[int]:
        first = max(0, self.block_tokens - self.sizing.overhead)
        lengths = [first] + [self.block_tokens] * (blocks - 1)
        out, left = [], words
        for n in lengths:
            out.append(min(n, left))
            left -= out[-1]
        return out

    def follow_up(
        self,
        record: TraceRecord,
        parent: TraceRecord,
        said: list[dict[str, Any]],
        answer: str,
        said_tokens: int | None,
    ) -> Prompt:
        """The prompt of a call that continues `parent`, which was sent as `said` and
        answered `answer` on this run: those, then new words (a tool's result, or the user's
        turn) to the call's recorded length. One header token per message is assumed. The
        length counts from the parent's prompt as the server counted it on this run
        (`said_tokens`; None: it did not say, then as captured), so that one turn's error in
        that guess does not add up over a session's turns."""
        sent = parent.input_tokens if said_tokens is None else said_tokens
        rest = record.input_tokens - sent - parent.output_tokens - 1
        words = self._words(f"after:{record.line}", max(1, rest))
        role = "tool" if record.tools_answered else "user"
        turn: dict[str, Any] = {"role": role, "content": " ".join(words)}
        if role == "tool":
            turn["tool_call_id"] = f"call_{record.line}"
        messages = [*said, {"role": "assistant", "content": answer}, turn]
        return Prompt(messages=messages, max_tokens=record.output_tokens)

    def _char_lengths(self, words: int, record: TraceRecord) -> list[int]:
        """Each block's share of the words, by its characters (the last block the rest of
        `prompt_chars`); a block seen before keeps its first length."""
        chars = max(1, record.prompt_chars or 0)
        out = []
        for k, key in enumerate(record.prefix):
            size = min(BLOCK_CHARS, max(0, chars - k * BLOCK_CHARS))
            out.append(self._known.get(f"chars:{key}", round(words * size / chars)))
        return out

    def _message_lengths(self, words: int, record: TraceRecord) -> list[int]:
        keys = [f"message:{k}" for k in record.prefix]
        known = sum(self._known[k] for k in keys if k in self._known)
        new = sum(1 for k in keys if k not in self._known)
        each = max(1, (words - known) // new) if new else 0
        return [self._known.get(k, each) for k in keys]

    def _part(self, key: str, n: int) -> list[str]:
        part = self._parts.setdefault(key, [])
        if len(part) < n:
            part[:] = self._words(key, n)
        return part[:n]

    def _words(self, key: str, n: int) -> list[str]:
        """The first `n` words named `key`: the same words whoever asks, in whatever order."""
        name = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
        vocabulary = self.sizing.words
        out: list[str] = []
        for chunk in range(-(-max(0, n) // _CHUNK_WORDS)):
            rng = np.random.default_rng([self.seed, 1, name, chunk])
            out += [vocabulary[i] for i in rng.integers(0, len(vocabulary), size=_CHUNK_WORDS)]
        return out[: max(0, n)]
