"""vLLM's serving flags that change what an answer says, not how long it takes to make:
`--reasoning-parser`, `--enable-prompt-tokens-details`, `--enable-per-request-metrics`.
Pure, no I/O.

Shapes follow vLLM 0.32 (vllm/entrypoints/openai/chat_completion/serving.py,
vllm/entrypoints/generate/base/{protocol,serving}.py):
- with a reasoning parser a chat answer begins with a reasoning phase streamed as
  `delta.reasoning` (the chunk where it ends carries both, `content` first, null when the
  chunk holds no answer), counted in `usage.completion_tokens_details.reasoning_tokens`
  (on every chat usage object, 0 when the model did not reason); completions are not parsed;
- `--enable-prompt-tokens-details` adds `usage.prompt_tokens_details` {cached_tokens: the
  prefix-cache hit, and for chat created_cache_tokens: the prompt's full blocks newly cached};
- `--enable-per-request-metrics` adds `metrics` (build_per_request_timing_metrics) to the
  final usage chunk and the whole response, from the request's timestamps on the engine's
  clock: queued (arrival) → scheduled → first token → last token.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from typing import Any

from loadgen.sim.model.sequence import Seq
from loadgen.sim.vllm_flags.table import DEFAULT_REASONING_TOKENS

# vLLM 0.32's registered reasoning parsers (vllm/reasoning/__init__.py)
REASONING_PARSERS = (
    "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4",
    "deepseek_v41", "ernie45", "gemma4", "glm45", "glm47", "granite",
    "granite_thinking_parser", "hf", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling",
    "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo", "minicpmv", "minimax_m2",
    "minimax_m2_append_think", "minimax_m3", "mistral", "muse_glimmer", "nemotron_v3",
    "olmo3", "openai_gptoss", "plamo3", "poolside_v1", "qwen3", "seed_oss", "step3",
    "step3p5",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Serving:
    """The serving flags of one simulated server."""

    reasoning_parser: str | None = None
    reasoning_tokens: int = DEFAULT_REASONING_TOKENS  # mean; each request within ±50%
    prompt_tokens_details: bool = False
    per_request_metrics: bool = False
    spec_metrics: bool = False  # --per-request-spec-decode-metrics summary

    def __post_init__(self) -> None:
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"invalid reasoning parser: {self.reasoning_parser} "
                f"(chose from {{ {','.join(REASONING_PARSERS)} }})"
            )
        if self.reasoning_tokens < 0:
            raise ValueError("--reasoning-tokens must be ≥ 0")

    def reasoning_length(self, fingerprint: str, chat: bool, scripted: int | None) -> int:
        """How many of an answer's first tokens are reasoning: the script's count, else
        drawn uniformly from ±50% of the mean, fixed by the prompt (the same prompt
        thinks as long every time); 0 without a parser or for completions."""
        if self.reasoning_parser is None or not chat:
            return 0
        if scripted is not None:
            return scripted
        mean = self.reasoning_tokens
        draw = int.from_bytes(hashlib.sha256(f"reasoning:{fingerprint}".encode()).digest()[:8])
        return mean // 2 + draw % (mean + 1)

    def completion_details(self, chat: bool, reasoning: int) -> dict[str, Any] | None:
        """usage.completion_tokens_details: set on chat usage only with a parser."""
        if self.reasoning_parser is None or not chat:
            return None
        return {"reasoning_tokens": reasoning}

    def prompt_details(self, seq: Seq, chat: bool) -> dict[str, Any] | None:
        """usage.prompt_tokens_details as set: completions report the cached count only."""
        if not self.prompt_tokens_details:
            return None
        if not chat:
            return {"cached_tokens": seq.cached_tokens}
        return {"cached_tokens": seq.cached_tokens, "created_cache_tokens": seq.created_tokens}

    def metrics(self, seq: Seq) -> dict[str, Any] | None:
        """vLLM's PerRequestMetrics of a finished request (None when neither flag asks for
        it): the timings with --enable-per-request-metrics, `speculative_decoding` with
        --per-request-spec-decode-metrics when the request speculated."""
        spec = seq.spec.to_dict() if self.spec_metrics and seq.spec is not None else None
        if not self.per_request_metrics and spec is None:
            return None
        out: dict[str, Any] = timing_metrics(seq)
        if not self.per_request_metrics:
            out = dict.fromkeys(out)
        if spec is not None:
            out["speculative_decoding"] = spec
        return out


def timing_metrics(seq: Seq) -> dict[str, float | None]:
    """build_per_request_timing_metrics on the simulator's clock (seconds → ms)."""
    queued, scheduled = seq.queued_at, seq.scheduled_at
    first, last = seq.first_token_at, seq.last_token_at
    tokens = seq.generated
    out: dict[str, float | None] = dict.fromkeys(
        ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms",
         "tokens_per_second")
    )  # fmt: skip
    if scheduled is not None and first is not None:
        out["time_to_first_token_ms"] = (first - scheduled) * 1000
    if first is not None and last is not None:
        out["generation_time_ms"] = (last - first) * 1000
        if tokens > 1:
            out["mean_itl_ms"] = (last - first) / (tokens - 1) * 1000
    if queued is not None and scheduled is not None:
        out["queue_time_ms"] = (scheduled - queued) * 1000
        if last is not None and last > scheduled:
            out["tokens_per_second"] = tokens / (last - scheduled)
    return out


def reasoning_delta(reasoning: str, answer: str) -> dict[str, Any]:
    """The delta of a chunk with reasoning in it (vLLM's DeltaMessage, exclude_unset)."""
    if not answer and reasoning:
        return {"reasoning": reasoning}
    return {"content": answer or None, "reasoning": reasoning}


def serving_from_flags(args: argparse.Namespace) -> Serving:
    """The serving flags of the command line; ValueError for a parser vLLM does not have."""
    return Serving(
        reasoning_parser=args.reasoning_parser,
        reasoning_tokens=args.reasoning_tokens,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        per_request_metrics=args.enable_per_request_metrics,
        spec_metrics=args.per_request_spec_decode_metrics == "summary",
    )
