"""A number read from a record, checked: a missing key or a value that is no measurement
is one line naming the file, the record and the key. Pure."""

from __future__ import annotations

import math
from typing import Any

from loadgen.sim.twin.sources.stream import CaptureError

MAX_SECONDS = 24 * 3600.0  # a figure past this is no measurement of a request
MAX_TOKENS = 1e7
MAX_EPOCH = 1e11  # seconds: past the year 5000


def number(
    item: dict[str, Any], key: str, at: str, limit: float, default: float | None = None
) -> float:
    """item[key] as a float in [0, limit]; `default` when absent or null, if given."""
    value = item.get(key, default)
    if value is None:
        if default is not None:
            return default
        raise CaptureError(f"{at}: no {key}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CaptureError(f"{at}: {key} is not a number")
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise CaptureError(f"{at}: {key} {value} is out of range [0, {limit:g}]")
    return float(value)


def seconds(item: dict[str, Any], key: str, at: str, scale: float = 1.0) -> float | None:
    """A duration, None when absent or null; `scale` turns the file's unit into seconds."""
    value = item.get(key)
    if value is None:
        return None
    return number(item, key, at, MAX_SECONDS / scale) * scale


def tokens(item: dict[str, Any], key: str, at: str, default: float | None = None) -> int:
    return int(number(item, key, at, MAX_TOKENS, default))


def table(item: Any, key: str, at: str) -> dict[str, Any]:
    """item[key] when it is an object; else the one line a file of another shape gets."""
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, dict):
        raise CaptureError(f"{at}: no {key} object")
    return value


def tpot(e2e: float | None, ttft: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first, as the proxy measures it; None for a single
    token, or when every token came in one delivery (which says nothing of decoding)."""
    if e2e is None or ttft is None or output_tokens < 2 or e2e <= ttft:
        return None
    return (e2e - ttft) / (output_tokens - 1)
