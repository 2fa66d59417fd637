"""Per-session figures of a capture: the model's time is the union of its calls (fan-out
siblings overlap), the rest is the tools'; prefix hits only where the server said."""

from __future__ import annotations

import pytest

from loadgen.analysis.sessions import per_session, ttft_by_turn


def line(session: str, at: float, e2e: float, turn: int, **more: object) -> dict:
    return {"session": session, "arrived_at": at, "e2e_s": e2e, "turn": turn,
            "input_tokens": 100, "ttft_s": 0.1 * turn, **more}  # fmt: skip


def test_overlapping_calls_count_once_and_the_gaps_are_the_tools() -> None:
    lines = [
        line("a", 0.0, 1.0, 1, cached_tokens=0),
        line("a", 1.5, 1.0, 2, cached_tokens=80),  # 0.5 s of tool before it
        line("a", 3.0, 1.0, 3, cached_tokens=90),  # a fan-out of two, overlapping
        line("a", 3.5, 1.0, 3, cached_tokens=90),
        line("b", 0.0, 2.0, 1),
        {"session": None, "arrived_at": 0.0, "e2e_s": 9.0},  # no session: not counted
    ]
    a, b = per_session(lines)
    assert (a.session, a.calls, a.turns) == ("a", 4, 3)
    assert a.span_s == pytest.approx(4.5) and a.model_s == pytest.approx(3.5)
    assert a.tools_s == pytest.approx(1.0) and a.model_share == pytest.approx(3.5 / 4.5)
    assert a.prefix_hit_share == pytest.approx(260 / 400)
    assert b.prefix_hit_share is None  # absent is not zero
    turns = ttft_by_turn(lines)
    assert turns[3] == {"calls": 2, "p50_s": pytest.approx(0.3), "p90_s": pytest.approx(0.3)}
    assert turns[1]["calls"] == 2
