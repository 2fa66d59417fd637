"""Per-session figures of a capture: the model's time is the union of its calls (fan-out
siblings overlap), the rest is the tools'; prefix hits only where the server said."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from loadgen import agents
from loadgen.analysis.sessions import from_lines, per_session, ttft_by_turn

CAPTURE = Path(__file__).parents[1] / "fixtures" / "agent-capture.jsonl"


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
    a, b = per_session(from_lines(lines))
    assert (a.session, a.calls, a.turns) == ("a", 4, 3)
    assert a.span_s == pytest.approx(4.5) and a.model_s == pytest.approx(3.5)
    assert a.tools_s == pytest.approx(1.0) and a.model_share == pytest.approx(3.5 / 4.5)
    assert a.prefix_hit_share == pytest.approx(260 / 400)
    assert b.prefix_hit_share is None  # absent is not zero
    turns = ttft_by_turn(from_lines(lines))
    assert turns[3] == {"calls": 2, "p50_s": pytest.approx(0.3), "p90_s": pytest.approx(0.3)}
    assert turns[1]["calls"] == 2


def test_the_sessions_command_reads_the_capture_as_its_lines_say(capsys) -> None:
    """`loadgen sessions` on the agent capture: each session's calls, span and TTFT by turn
    as counted here from its lines; the trace ids stay in the capture."""
    lines = [json.loads(x) for x in CAPTURE.read_text().splitlines()]
    assert agents.main([str(CAPTURE), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    mine: dict[str, list[dict]] = defaultdict(list)
    for x in lines:
        mine[x["session"]].append(x)
    assert len(printed["sessions"]) == len(mine) == 3
    for s in printed["sessions"]:
        calls = mine[s["session"]]
        end = max(c["arrived_at"] + c["e2e_s"] for c in calls)
        assert s["calls"] == len(calls) and s["turns"] == max(c["turn"] for c in calls)
        assert s["span_s"] == pytest.approx(end - min(c["arrived_at"] for c in calls))
        assert "slowest_trace_id" not in s
    assert [s["span_s"] for s in printed["sessions"]] == sorted(
        (s["span_s"] for s in printed["sessions"]), reverse=True
    )
    first = [x["ttft_s"] for x in lines if x["turn"] == 1]
    assert printed["ttft_by_turn"]["1"]["calls"] == len(first) == 5
    assert printed["ttft_by_turn"]["1"]["p50_s"] == pytest.approx(statistics.median(first))
