"""What a server says about one request beyond its token counts. Pure, no I/O.

vLLM 0.32 puts it on the final usage chunk of a stream (and in a whole response):

    "usage": {..., "prompt_tokens_details": {"cached_tokens": 256, ...},
                   "completion_tokens_details": {"reasoning_tokens": 118}},
    "metrics": {"time_to_first_token_ms": 18.96, "generation_time_ms": 25.88,
                "queue_time_ms": 0.05, "mean_itl_ms": 6.47, "tokens_per_second": 111.5,
                "speculative_decoding": {"mean_acceptance_length": 2.4,
                                         "draft_acceptance_rate": 0.47, ...}}

`prompt_tokens_details` comes with `--enable-prompt-tokens-details`, reasoning_tokens with a
`--reasoning-parser`, `metrics` with `--enable-per-request-metrics` (its
`speculative_decoding` when speculating). A field the server did not send is absent here,
never a zero; one that is not a count or a duration is not taken and makes the event invalid.
The server's clock starts when the request is queued in its engine: its TTFT is from being
scheduled to the first token (vLLM's definition), which is not the proxy's.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

MAX_COUNT = 2**53  # as meter.MAX_TOKEN_COUNT: exact as a float in every sink

# record field <- metrics key (milliseconds)
_TIMINGS = (
    ("server_queue_s", "queue_time_ms"),
    ("server_ttft_s", "time_to_first_token_ms"),
    ("server_decode_s", "generation_time_ms"),
    ("server_itl_s", "mean_itl_ms"),
)
# record field <- metrics.speculative_decoding key
_SPECULATION = (
    ("spec_acceptance_rate", "draft_acceptance_rate"),
    ("spec_acceptance_length", "mean_acceptance_length"),
)


class Report(NamedTuple):
    values: dict[str, float | int]  # RequestTiming field -> value, only those sent
    reasoning_tokens: int | None = None
    invalid: bool = False  # something was sent that is not a count or a duration


NOTHING = Report({})


def read(payload: dict[str, Any]) -> Report:
    """The report in a final usage chunk or a whole response (its top-level fields)."""
    usage = payload.get("usage")
    if payload.get("metrics") is None and not (
        isinstance(usage, dict)
        and ("prompt_tokens_details" in usage or "completion_tokens_details" in usage)
    ):
        return NOTHING  # a server without these flags: the usual final chunk
    values: dict[str, float | int] = {}
    invalid = False
    reasoning = None
    if isinstance(usage, dict):
        cached, bad = _count(_get(usage, "prompt_tokens_details", "cached_tokens"))
        if cached is not None:
            values["cached_tokens"] = cached
        reasoning, bad_reasoning = _count(
            _get(usage, "completion_tokens_details", "reasoning_tokens")
        )
        invalid = bad or bad_reasoning
    metrics = payload.get("metrics")
    if isinstance(metrics, dict):
        for name, key in _TIMINGS:
            seconds, bad = _number(metrics.get(key), 1e-3)
            invalid = invalid or bad
            if seconds is not None:
                values[name] = seconds
        speculation = metrics.get("speculative_decoding")
        if isinstance(speculation, dict):
            for name, key in _SPECULATION:
                value, bad = _number(speculation.get(key), 1.0)
                invalid = invalid or bad
                if value is not None:
                    values[name] = value
    return Report(values, reasoning, invalid)


def _get(usage: dict[str, Any], details: str, key: str) -> Any:
    part = usage.get(details)
    return part.get(key) if isinstance(part, dict) else None


def _count(value: Any) -> tuple[int | None, bool]:
    """(the count, whether a value was sent that is not one)."""
    if value is None:
        return None, False
    if type(value) is int and 0 <= value <= MAX_COUNT:
        return value, False
    return None, True


def _number(value: Any, scale: float) -> tuple[float | None, bool]:
    """(value × scale, whether a value was sent that is not a finite non-negative number)."""
    if value is None:
        return None, False
    if type(value) in (int, float) and math.isfinite(value) and value >= 0:
        return value * scale, False
    return None, True
