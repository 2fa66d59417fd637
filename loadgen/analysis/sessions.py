"""Agents' sessions: per session, its calls, how long it took, how much of that the model
had and how much the tools (or the user, or the client), how much of its prompts the
server's prefix cache served, and TTFT by turn. One reading for the proxy's capture
(`from_lines`, `loadgen sessions`) and a run's own records (`view`, summary.json's
`sessions`): both become `Call`s first. Pure: calls in, figures out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from loadgen.analysis.records import Record
from loadgen.analysis.slices import min_requests
from loadgen.analysis.stats import union_seconds

TURNS_LISTED = 10  # summary.json's TTFT by turn: the first ten turns, then the deepest
SLOWEST_SESSIONS = 3


@dataclass(frozen=True, slots=True)
class Call:
    """A model call of a session, as the proxy logged it or a run recorded it."""

    session: str
    start: float | None  # epoch seconds: the proxy's arrival, a run's send
    end: float | None  # its last byte
    turn: int | None
    ttft_s: float | None
    input_tokens: float | None
    cached_tokens: float | None  # None: the server did not say
    trace_id: str | None = None
    block: int = 0  # a run's block: a replay's sessions come again in each


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
    slowest_trace_id: str | None = None  # the trace of its longest call

    def row(self) -> dict[str, Any]:
        """The figures `loadgen sessions --json` prints for it (the capture has the ids)."""
        row = asdict(self)
        del row["slowest_trace_id"]
        return row


def _number(line: Mapping[str, Any], key: str) -> float | None:
    value = line.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def from_lines(lines: Iterable[Mapping[str, Any]]) -> list[Call]:
    """The calls of the proxy's request log lines that name a session."""
    calls = []
    for line in lines:
        session = line.get("session")
        if not isinstance(session, str):
            continue
        start, e2e = _number(line, "arrived_at"), _number(line, "e2e_s")
        turn, trace = _number(line, "turn"), line.get("trace_id")
        calls.append(
            Call(
                session,
                start,
                None if start is None or e2e is None else start + e2e,
                None if turn is None else int(turn),
                _number(line, "ttft_s"),
                _number(line, "input_tokens"),
                _number(line, "cached_tokens"),
                trace if isinstance(trace, str) else None,
            )
        )
    return calls


def from_records(records: Iterable[Record]) -> list[Call]:
    """The calls of a run's records that belong to a session (a replayed agent's, --turns)."""
    return [
        Call(
            r.session,
            r.sent_at,
            r.end_at,
            r.turn,
            r.ttft_s,
            r.input_tokens,
            r.cached_tokens,
            r.trace_id,
            r.block,
        )
        for r in records
        if r.session is not None
    ]


def _hit_share(calls: Sequence[Call]) -> float | None:
    """Cached over prompt tokens; None when no call's server said what it cached."""
    prompt = sum(c.input_tokens or 0 for c in calls)
    known = [c.cached_tokens for c in calls if c.cached_tokens is not None]
    return sum(known) / prompt if known and prompt else None


def per_session(calls: Iterable[Call]) -> list[SessionFigures]:
    """A figure set per session, longest first."""
    grouped: dict[tuple[int, str], list[Call]] = defaultdict(list)
    for call in calls:
        grouped[call.block, call.session].append(call)
    out = []
    for (_, session), mine in grouped.items():
        timed = [(c.start, c.end, c) for c in mine if c.start is not None and c.end is not None]
        if not timed:
            continue
        spans = [(a, b) for a, b, _ in timed]
        span = max(b for _, b in spans) - min(a for a, _ in spans)
        model = union_seconds(spans)
        _, _, longest = max(timed, key=lambda t: t[1] - t[0])
        out.append(
            SessionFigures(
                session,
                len(mine),
                max(c.turn or 1 for c in mine),
                span,
                model,
                max(0.0, span - model),
                model / span if span > 0 else 1.0,
                _hit_share(mine),
                longest.trace_id,
            )
        )
    return sorted(out, key=lambda s: -s.span_s)


def _p50_p90(values: Sequence[float]) -> tuple[float, float]:
    p50, p90 = np.percentile(values, [50, 90])
    return float(p50), float(p90)


def ttft_by_turn(calls: Iterable[Call]) -> dict[int, dict[str, float]]:
    """Median and P90 TTFT of the calls at each turn, over every session."""
    by_turn: dict[int, list[float]] = defaultdict(list)
    for call in calls:
        if call.turn is not None and call.ttft_s is not None:
            by_turn[call.turn].append(call.ttft_s)
    out: dict[int, dict[str, float]] = {}
    for turn, values in sorted(by_turn.items()):
        p50, p90 = _p50_p90(values)
        out[turn] = {"calls": len(values), "p50_s": p50, "p90_s": p90}
    return out


def view(records: Iterable[Record]) -> dict[str, Any] | None:
    """summary.json's `sessions` of a target's measured records; None when none has a
    session. Percentiles over sessions (P50, P90) are numpy's linear ones, as by turn."""
    calls = from_records(records)
    found = per_session(calls)
    if not found:
        return None
    turns = ttft_by_turn(calls)
    listed = [t for t in turns if t <= TURNS_LISTED] + [t for t in turns if t > TURNS_LISTED][-1:]
    span, share = _p50_p90([s.span_s for s in found]), _p50_p90([s.model_share for s in found])
    return {
        "sessions": len(found),
        "calls": sum(s.calls for s in found),
        "span_s": {"p50": span[0], "p90": span[1]},
        "model_share": {"p50": share[0], "p90": share[1]},
        "prefix_hit_share": _hit_share(calls),
        "ttft_by_turn": [{"turn": t, **turns[t]} for t in listed],
        "slowest": [
            {
                "session": s.session,
                "span_s": s.span_s,
                "calls": s.calls,
                "model_share": s.model_share,
                "trace_id": s.slowest_trace_id,
            }
            for s in found[:SLOWEST_SESSIONS]
        ],
    }


def sentence(block: Mapping[str, Any]) -> str:
    """The sessions in one sentence: how many, the model's share of their time, the prefix
    cache, and TTFT from the first turn to the deepest with calls enough for a median that
    one slow call does not make (slices' minimum)."""
    count = block["sessions"]
    said = (
        f"{count} session{'' if count == 1 else 's'}, {block['calls'] / count:.1f} calls each: "
        f"the model had {block['model_share']['p50']:.0%} of a session's time (median), "
        "tools and the client the rest"
    )
    if block["prefix_hit_share"] is not None:
        said += f"; the prefix cache served {block['prefix_hit_share']:.0%} of their prompt tokens"
    enough = min_requests("p50")
    turns = [t for t in block["ttft_by_turn"] if t["calls"] >= enough]
    if len(turns) > 1:
        first, last = turns[0], turns[-1]
        ratio = last["p50_s"] / first["p50_s"] if first["p50_s"] > 0 else 1.0
        verb = "grows" if ratio > 1.1 else "falls" if ratio < 1 / 1.1 else "holds"
        said += (
            f"; TTFT {verb} from {first['p50_s'] * 1e3:.0f} ms at turn {first['turn']} to "
            f"{last['p50_s'] * 1e3:.0f} ms at turn {last['turn']} (P50 of turns with "
            f"{enough} calls or more)"
        )
    return said
