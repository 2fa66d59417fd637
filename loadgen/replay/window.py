"""Which records of a trace a run replays, and when each is due. Pure, no I/O.

The window opens `start_s` after the trace's first record and holds the records from there
for `duration_s` of trace time, or the first `requests` of them. Each is due at its offset
from the window's first record divided by the speed; a shard of N takes every Nth record of
the window (by position) and keeps its offset, so N shards started together send what one
client would have.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.replay.formats import TraceRecord


@dataclass(frozen=True, slots=True)
class Arrival:
    offset_s: float  # from the window's first record, at the replay's speed
    record: TraceRecord


def window(
    records: Sequence[TraceRecord],
    start_s: float = 0.0,
    duration_s: float | None = None,
    requests: int | None = None,
) -> list[TraceRecord]:
    """The records of the window, in order; raises ValueError when it is empty."""
    if not records:
        raise ValueError("the trace has no records to replay")
    opens = records[0].at + start_s
    chosen = [r for r in records if r.at >= opens]
    if duration_s is not None:
        chosen = [r for r in chosen if r.at < opens + duration_s]
    if requests is not None:
        chosen = chosen[:requests]
    if not chosen:
        span = records[-1].at - records[0].at
        raise ValueError(
            f"the window (from {start_s:g} s, "
            + (f"{duration_s:g} s long" if duration_s is not None else f"{requests} requests")
            + f") holds no records: the trace spans {span:g} s"
        )
    return chosen


def duration_for(records: Sequence[TraceRecord], start_s: float, count: int) -> float | None:
    """The shortest whole-second window from `start_s` that holds `count` records (a window
    holds the records before its end); None when fewer than `count` follow its start."""
    if not records or count < 1:
        return None
    opens = records[0].at + start_s
    chosen = [r for r in records if r.at >= opens]
    if len(chosen) < count:
        return None
    return float(math.floor(chosen[count - 1].at - opens) + 1)


def schedule(chosen: Sequence[TraceRecord], speed: float = 1.0) -> list[Arrival]:
    """Each record of a window at its offset from the first, divided by the speed."""
    if speed <= 0:
        raise ValueError("--replay-speed must be positive")
    first = chosen[0].at
    return [Arrival((r.at - first) / speed, r) for r in chosen]


def share(arrivals: Sequence[Arrival], index: int, count: int) -> list[Arrival]:
    """Shard `index` of `count`'s arrivals: every count-th, offsets kept; an agent's
    session stays whole in one shard (its calls wait for each other)."""
    return [a for n, a in enumerate(arrivals) if _shard(a, n, count) == index]


def _shard(arrival: Arrival, position: int, count: int) -> int:
    session = arrival.record.session
    if session is None:
        return position % count
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "big") % count


def split(arrivals: Sequence[Arrival], parts: int) -> list[list[Arrival]]:
    """Consecutive parts for a target's blocks; every part's offsets start from zero again."""
    size, extra = divmod(len(arrivals), parts)
    pieces, at = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        piece = list(arrivals[at : at + n])
        at += n
        if piece:
            first = piece[0].offset_s
            piece = [Arrival(a.offset_s - first, a.record) for a in piece]
        pieces.append(piece)
    return pieces
