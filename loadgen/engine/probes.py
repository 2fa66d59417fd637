"""Checked answers inside the load: eval items and consistency prompts, sent and judged.

Eval items (--eval) take a share of each target's requests (--eval-fraction), spread evenly
(the k-th request is an item when floor(k·F) grows) and in file order, so every target gets
the same items in the same order. They are sent greedy (temperature 0) without ignore_eos,
so the model stops where it would, and scored as they complete.

Consistency prompts (--consistency N) are N fixed synthetic prompts. Before the load, each
target answers them one at a time (the reference); once a block's measured window opens,
its next requests are those prompts again, now among the load, and each answer is compared
with its reference word by word.

Prompts, answers and outputs are compared in memory: a Record keeps the item's id and
whether it was right, or a keyed hash and the first differing word, and the text only with
--content-capture. Pure apart from `take_references`, which sends.
"""

from __future__ import annotations

import math
import secrets
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.analysis import consistency, evals
from loadgen.analysis.evals import EvalItem
from loadgen.analysis.records import Record
from loadgen.inputs.prompt_text import user_messages

EVAL_MAX_TOKENS = 512  # an item without max_tokens: room for a worked answer, then a cap
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"

# sends one request alone: (target, path, body) -> (record, output text)
Send = Callable[[str, str, dict[str, Any]], Awaitable[tuple[Record, str]]]


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """What --eval, --eval-fraction, --consistency and --content-capture asked for."""

    eval: str | None  # a JSON-lines file or builtin:NAME
    eval_fraction: float
    consistency: int  # fixed prompts to compare, 0: none
    content_capture: bool


@dataclass(frozen=True, slots=True)
class Probe:
    """One checked request: its path and body, and what its answer is judged against."""

    path: str
    body: dict[str, Any]
    item: EvalItem | None = None
    prompt: int | None = None  # the consistency prompt's index


@dataclass(slots=True)
class Probes:
    items: list[EvalItem]
    fraction: float  # share of requests that are eval items
    prompts: list[tuple[str, dict[str, Any]]]  # consistency prompts: (path, body), no model
    endpoint: str  # the run's: chat | completions
    content_capture: bool = False
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))  # never written
    references: dict[str, list[str]] = field(default_factory=dict)  # target -> outputs
    _taken: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    _items_sent: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    _pending: dict[str, list[int]] = field(default_factory=dict)  # prompts still to resend
    _timed_out: set[str] = field(default_factory=set)  # items whose regex was cut off once

    def take(self, target: str, model: str, measured: bool) -> Probe | None:
        """The target's next request when it is a checked one; None for ordinary load."""
        pending = self._pending.get(target)
        if measured and pending:
            index = pending.pop(0)
            path, body = self.prompts[index]
            return Probe(path, {**body, "model": model}, prompt=index)
        if not self.items:
            return None
        k = self._taken[target]
        self._taken[target] = k + 1
        if math.floor((k + 1) * self.fraction) == math.floor(k * self.fraction):
            return None
        item = self.items[self._items_sent[target] % len(self.items)]
        self._items_sent[target] += 1
        return Probe(*self._request(item, model), item=item)

    def _request(self, item: EvalItem, model: str) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": item.max_tokens or EVAL_MAX_TOKENS,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if item.messages is not None:
            return CHAT, {**body, "messages": item.messages}
        assert item.prompt is not None
        if self.endpoint == "chat":
            return CHAT, {**body, "messages": user_messages(item.prompt)}
        return COMPLETIONS, {**body, "prompt": item.prompt}

    async def take_references(self, targets: dict[str, str], send: Send) -> None:
        """Each target's answers to the consistency prompts, one request at a time."""
        for target, model in targets.items():
            outputs = []
            for path, body in self.prompts:
                record, text = await send(target, path, {**body, "model": model})
                if not record.ok:
                    raise RuntimeError(
                        f"{target}: a --consistency reference request failed ({record.error})"
                    )
                outputs.append(text)
            self.references[target] = outputs
            self._pending[target] = list(range(len(self.prompts)))

    def judge(self, probe: Probe, record: Record, output: str) -> None:
        """Mark the record with its verdict (nothing for a failed request)."""
        if not record.ok:
            return
        if probe.item is not None:
            record.eval_id = probe.item.id
            # a pattern cut off once is not tried again: each try stalls the load for its time
            if probe.item.id not in self._timed_out:
                record.correct = probe.item.correct(output)
            if record.correct is None:
                record.eval_timed_out = True
                self._timed_out.add(probe.item.id)
            if self.content_capture:
                record.content = {"output": output, "answer": probe.item.answer}
            return
        assert probe.prompt is not None
        reference = self.references[record.target][probe.prompt]
        record.consistency_id = str(probe.prompt)
        record.output_hash = consistency.keyed_hash(self.key, output)
        record.first_difference = consistency.first_difference(reference.split(), output.split())
        if self.content_capture:
            record.content = {"output": output, "reference": reference}


def settings(args: Any) -> ProbeSettings | None:
    """The flags' ProbeSettings (None: neither --eval nor --consistency); ValueError, naming
    the flag or the file's line, for anything that would not run: before any load."""
    if args.eval_fraction is not None and args.eval is None:
        raise ValueError("--eval-fraction needs --eval")
    fraction = 1.0 if args.eval_fraction is None else args.eval_fraction  # parsed in (0, 1]
    if args.eval is None and not args.consistency:
        if args.content_capture:
            raise ValueError("--content-capture keeps --eval and --consistency outputs: give one")
        return None
    if args.replay or args.turns > 1 or args.workers > 1 or args.shard:
        raise ValueError(
            "--eval and --consistency run in one process (no --workers, --shard), without "
            "--replay or --turns"
        )
    if args.eval is not None:
        evals.load(args.eval, args.seed)  # a bad file stops the run here, before any load
        if args.eval_fraction is None and args.dataset:
            raise ValueError("--eval with --dataset: give --eval-fraction to mix the two")
    return ProbeSettings(
        eval=args.eval,
        eval_fraction=fraction,
        consistency=args.consistency,
        content_capture=args.content_capture,
    )
