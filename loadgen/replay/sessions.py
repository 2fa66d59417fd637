"""An agent trace's call graph: which replayed call waits for which. Pure, no I/O.

A call whose `parent` names an earlier call of the window is sent when that call's answer
has ended on this run, plus its recorded gap (scaled by --gap-scale); every other call
(a session's first, a sub-agent joined by its header, a call whose parent is outside the
window, failed or never recorded) is a root, sent at its own offset. A parent must come
before its child in arrival order, so a cycle in a file cannot hold a call back: the
earliest call of a cycle is a root, the rest follow it.

How many sessions a window starts a minute, at a speed, is what `capacity --by speed`
says its answer in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.replay.window import Arrival


@dataclass(frozen=True, slots=True)
class Graph:
    roots: list[Arrival]
    children: dict[int, list[Arrival]] = field(default_factory=dict)  # by the parent's line
    unlinked: int = 0  # calls naming a parent the window does not hold before them

    @property
    def linked(self) -> int:
        return sum(len(kids) for kids in self.children.values())

    def meta(self) -> dict[str, int]:
        """What run.json says of it."""
        sessions = {a.record.session for a in self.roots if a.record.session is not None}
        return {"sessions": len(sessions), "linked": self.linked, "unlinked": self.unlinked}


def graph(arrivals: Sequence[Arrival]) -> Graph:
    """The window's roots (in order) and each call's children (in order)."""
    seen: dict[str, Arrival] = {}
    roots: list[Arrival] = []
    children: dict[int, list[Arrival]] = {}
    unlinked = 0
    for arrival in arrivals:
        record = arrival.record
        parent = seen.get(record.parent) if record.parent is not None else None
        if parent is not None:
            children.setdefault(parent.record.line, []).append(arrival)
        else:
            unlinked += record.parent is not None
            roots.append(arrival)
        if record.call is not None:
            seen.setdefault(record.call, arrival)  # a repeated id: its first call
    return Graph(roots, children, unlinked)


def measured(tree: Graph, warmup_s: float) -> int:
    """Calls a block measures: each root at or past the warm-up, and every call that
    follows it (a call follows its parent, so it is in the warm-up exactly when its root is)."""
    count = 0
    stack = [a for a in tree.roots if a.offset_s >= warmup_s]
    while stack:
        arrival = stack.pop()
        count += 1
        stack.extend(tree.children.get(arrival.record.line, ()))
    return count


def per_minute(arrivals: Sequence[Arrival], speed: float) -> float | None:
    """Sessions started per minute when the window is replayed at `speed`: its sessions
    over its length (its first record to its last, trace time); None without a session,
    or without a length to start them over."""
    count = graph(arrivals).meta()["sessions"]
    span = arrivals[-1].record.at - arrivals[0].record.at if arrivals else 0.0
    if not count or span <= 0:
        return None
    return count / span * speed * 60
