"""Speculative decoding as vLLM's `--speculative-config` runs it, reduced to what the timing
needs. Pure, no I/O.

Each decode step of a speculating sequence verifies `num_speculative_tokens` draft tokens:
the step computes 1 + k tokens for it (the performance model prices them), and it samples
1 + j, where j, the drafts accepted, stops at the first rejected draft (each accepted with
probability `acceptance_rate`, the simulator's own key: a real drafter's rate depends on the
text). Memory-bound decode costs about the same for 1 + k tokens as for one, so TPOT falls
by about the mean acceptance length; compute-bound steps gain less.

With `"method": "draft_model"` a separate draft model proposes the drafts, and costs time:
each step runs it k times after the target's forward (once over the step's tokens, then once
per further draft), on the same GPUs. Its shape is a preset's [model] table, named by
`model` (a bundled preset or a preset file, resolved by vllm_flags/table.py), and its weights and KV
cache take GPU memory beside the target's. The other methods' proposers (n-gram lookup,
EAGLE/Medusa/MTP heads) are taken as free.

`--per-request-spec-decode-metrics summary` adds vLLM's `speculative_decoding` object
(RequestSpecDecodeMetrics.to_dict) to a request's `metrics`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from loadgen.sim.model.roofline import ModelSpec

METHODS = ("ngram", "eagle", "eagle3", "medusa", "mtp", "draft_model", "suffix")
KEYS = ("method", "num_speculative_tokens", "model", "acceptance_rate")


@dataclass(frozen=True, slots=True)
class Speculation:
    num_speculative_tokens: int
    acceptance_rate: float = 0.7
    method: str = "ngram"
    model: str = ""  # the draft model, as given
    draft: ModelSpec | None = None  # its shape, when its cost is modelled (draft_model)

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be ≥ 1")
        if not 0 <= self.acceptance_rate <= 1:
            raise ValueError("acceptance_rate must be in [0, 1]")
        if self.method not in METHODS:
            raise ValueError(f"speculative method {self.method!r}: one of {', '.join(METHODS)}")

    def accepted(self, rng: random.Random) -> int:
        """Drafts one verify step accepts."""
        j = 0
        while j < self.num_speculative_tokens and rng.random() < self.acceptance_rate:
            j += 1
        return j

    @property
    def mean_acceptance_length(self) -> float:
        """E[1 + j]: tokens per verify step, the bonus token included."""
        a, k = self.acceptance_rate, self.num_speculative_tokens
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def parse(text: str) -> Speculation:
    """`--speculative-config` JSON; a key the simulator does not model is refused."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config: not JSON ({exc.msg})") from None
    if not isinstance(config, dict) or "num_speculative_tokens" not in config:
        raise ValueError("--speculative-config: a JSON object with num_speculative_tokens")
    unknown = sorted(set(config) - set(KEYS))
    if unknown:
        raise ValueError(
            f"--speculative-config: cannot honour {', '.join(unknown)} (the simulator models "
            f"{', '.join(KEYS)}; acceptance_rate is its own)"
        )
    return Speculation(**config)


@dataclass(slots=True)
class SpecStats:
    """One sequence's verify steps (vLLM's RequestSpecDecodeMetrics)."""

    num_spec_tokens: int
    histogram: list[int] = field(default_factory=list)  # steps by drafts accepted
    num_draft_tokens: int = 0

    def __post_init__(self) -> None:
        self.histogram = [0] * (self.num_spec_tokens + 1)

    def record(self, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.num_draft_tokens += self.num_spec_tokens

    def to_dict(self) -> dict[str, Any]:
        steps = sum(self.histogram)
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        return {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.num_draft_tokens
            if self.num_draft_tokens
            else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
