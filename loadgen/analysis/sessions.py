"""Agents' sessions from the proxy's capture: per session, its calls, how long it took, how
much of that the model had and how much the tools (or the user), how much of its prompts the
server's prefix cache served, and TTFT by turn. Pure: request log lines in, figures out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class SessionFigures:
    session: str
    calls: int
    turns: int  # the deepest turn
    span_s: float  # first call's arrival to the last call's last byte
    model_s: float  # time with at least one of its calls in flight
    tools_s: float  # the rest: tools, the user, the agent's own work
    model_share: float
    prefix_hit_share: float | None  # cached over prompt tokens; None: the server said nothing

    def row(self) -> dict[str, Any]:
        return asdict(self)


def _busy(intervals: list[tuple[float, float]]) -> float:
    """How long the union of `intervals` lasts (fan-out siblings overlap)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _number(line: Mapping[str, Any], key: str) -> float | None:
    value = line.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def per_session(lines: Iterable[Mapping[str, Any]]) -> list[SessionFigures]:
    """A figure set per session of the chat calls' lines, longest first."""
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for line in lines:
        if isinstance(line.get("session"), str):
            grouped[line["session"]].append(line)
    out = []
    for session, calls in grouped.items():
        spans = []
        for call in calls:
            start, e2e = _number(call, "arrived_at"), _number(call, "e2e_s")
            if start is not None and e2e is not None:
                spans.append((start, start + e2e))
        if not spans:
            continue
        span = max(b for _, b in spans) - min(a for a, _ in spans)
        model = _busy(spans)
        prompt = sum(_number(c, "input_tokens") or 0 for c in calls)
        cached = [_number(c, "cached_tokens") for c in calls]
        known = [c for c in cached if c is not None]
        out.append(
            SessionFigures(
                session,
                len(calls),
                max(int(_number(c, "turn") or 1) for c in calls),
                span,
                model,
                max(0.0, span - model),
                model / span if span > 0 else 1.0,
                sum(known) / prompt if known and prompt else None,
            )
        )
    return sorted(out, key=lambda s: -s.span_s)


def ttft_by_turn(lines: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """Median and P90 TTFT of the calls at each turn, over every session."""
    by_turn: dict[int, list[float]] = defaultdict(list)
    for line in lines:
        turn, ttft = _number(line, "turn"), _number(line, "ttft_s")
        if turn is not None and ttft is not None and line.get("session") is not None:
            by_turn[int(turn)].append(ttft)
    return {
        turn: {
            "calls": len(values),
            "p50_s": float(np.percentile(values, 50)),
            "p90_s": float(np.percentile(values, 90)),
        }
        for turn, values in sorted(by_turn.items())
    }
