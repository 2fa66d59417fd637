"""What a request will generate, decided when it arrives. Pure, no I/O.

The simulated model is deterministic like greedy decoding: the same prompt (and seed)
always gives the same completion. Where it stops by itself (its EOS) is drawn once per
prompt: every token is EOS with probability 1/mean_output_tokens, so natural lengths are
geometric with that mean, from a generator seeded with (seed, prompt fingerprint).
`max_tokens` (default: what is left of max_model_len) caps it with finish_reason "length";
`ignore_eos` always runs to that cap; a `stop` string ends the text before the string.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from loadgen.sim.model.tokenizer import generated_pieces


@dataclass(frozen=True, slots=True)
class OutputPlan:
    pieces: list[str]  # the text of each output token, in order (may end in "" after a stop)
    finish_reason: str  # "stop" | "length"
    stop_reason: str | None = None  # the stop string that ended the text

    @property
    def tokens(self) -> int:
        return len(self.pieces)


def natural_length(prompt_key: int, seed: int, mean_output_tokens: int) -> int:
    """Tokens until the model's own EOS: geometric, mean `mean_output_tokens`, ≥ 1."""
    if mean_output_tokens <= 1:
        return 1
    u = random.Random(f"{seed}:{prompt_key}").random()
    return max(1, math.ceil(math.log1p(-u) / math.log1p(-1 / mean_output_tokens)))


def plan_output(
    prompt_key: int,
    limit: int,
    *,
    ignore_eos: bool = False,
    stop: tuple[str, ...] = (),
    seed: int = 0,
    mean_output_tokens: int = 256,
) -> OutputPlan:
    """The completion for a prompt with fingerprint `prompt_key`, at most `limit` tokens."""
    natural = limit if ignore_eos else natural_length(prompt_key, seed, mean_output_tokens)
    count = min(limit, natural)
    finish = "stop" if natural <= limit and not ignore_eos else "length"
    pieces = generated_pieces(prompt_key, count)
    if stop:
        return _apply_stop(pieces, stop) or OutputPlan(pieces, finish)
    return OutputPlan(pieces, finish)


def _apply_stop(pieces: list[str], stop: tuple[str, ...]) -> OutputPlan | None:
    """Cut at the earliest stop string: generation ends with the token that completes it
    and the text ends just before it."""
    text = "".join(pieces)
    found = [(i, s) for s in stop if s and (i := text.find(s)) >= 0]
    if not found:
        return None
    start, string = min(found)
    end = start + len(string)
    kept: list[str] = []
    offset = 0
    for piece in pieces:
        kept.append(piece[: max(0, start - offset)])
        offset += len(piece)
        if offset >= end:
            break
    return OutputPlan(kept, "stop", string)
