"""How a plan sizes one candidate (loadgen/commands/replicas.py), its capacity commands
answered from a table of what each count of replicas holds: which counts are checked, in
what order and at what level, and what the candidate is told."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadgen.commands import replicas


def level(argv: list[str], flag: str) -> float | None:
    return float(argv[argv.index(flag) + 1]) if flag in argv else None


class Table:
    """What `replicas` of the candidate hold (in the search's unit), and every capacity
    command run against it: (replicas, kind, start)."""

    def __init__(self, holds: Callable[[int], float], rate: float | None = None) -> None:
        self.holds = holds
        self.rate = rate
        self.ran: list[tuple[int, str, float]] = []

    def __call__(self, job: replicas.Job, n: int, argv: list[str], kind: str) -> dict[str, Any]:
        start = level(argv, "--start")
        assert start is not None
        self.ran.append((n, kind, start))
        held = self.holds(n) >= start
        if kind == "check":  # held to its one level
            assert level(argv, "--floor") == level(argv, "--ceiling") == start
            capacity = start if held else None
        else:  # from its start up, its floor there
            assert level(argv, "--floor") == start and "--ceiling" not in argv
            capacity = self.holds(n) if held else None
        share = None if capacity is None else capacity / (self.rate or 1.0)
        return {"replicas": n, "kind": kind, "share": share, "capacity": capacity,
                "reason": None if held else f"{n} short of {start:g}"}  # fmt: skip


def sized(
    monkeypatch: pytest.MonkeyPatch,
    table: Table,
    bound: int = 8,
    headroom: float = 0.0,
) -> dict[str, Any]:
    monkeypatch.setattr(replicas, "_ran", table)
    job = replicas.Job("c", "virtual:c", "", (), Path("/nonexistent"), table.rate, headroom,
                       bound, lambda argv: 2)  # fmt: skip
    return replicas._size(job)


def test_counts_are_checked_from_two_doubled_then_bisected(monkeypatch) -> None:
    table = Table(lambda n: 0.4 * n)  # three replicas hold the traffic
    result = sized(monkeypatch, table)
    assert table.ran == [
        (1, "search", 1.0),
        (2, "check", 1.0),
        (4, "check", 1.0),
        (3, "check", 1.0),
        (3, "search", 1.0),  # the count bought, in full
    ]
    assert (result["replicas_1x"], result["replicas"], result["reason"]) == (3, 3, None)


def test_the_headroom_is_checked_from_the_count_that_holds_the_traffic(monkeypatch) -> None:
    table = Table(lambda n: 0.4 * n)  # 1.5x needs four
    result = sized(monkeypatch, table, headroom=0.5)
    checked = [(n, start) for n, kind, start in table.ran if kind == "check"]
    assert checked == [(2, 1.0), (4, 1.0), (3, 1.0), (3, 1.5), (6, 1.5), (4, 1.5)]
    assert (result["replicas_1x"], result["replicas"]) == (3, 4)
    assert table.ran[-1] == (4, "search", 1.5)


def test_one_replica_that_holds_the_traffic_is_searched_alone(monkeypatch) -> None:
    table = Table(lambda n: 1.7 * n)
    result = sized(monkeypatch, table)
    assert table.ran == [(1, "search", 1.0)]
    assert (result["replicas"], [s["share"] for s in result["searches"]]) == (1, [1.7])


@pytest.mark.parametrize(
    "holds, reason",
    [
        (lambda n: 0.05 * n, "needs more than 4 replicas (the bound)"),
        (lambda n: 0.0, "meets the SLOs at no size: 1 short of 0.0312"),
    ],
)
def test_past_the_bound_one_replica_far_below_the_traffic_says_which(
    monkeypatch, holds, reason
) -> None:
    table = Table(holds)
    result = sized(monkeypatch, table, bound=4)
    assert table.ran == [
        (1, "search", 1.0),
        (2, "check", 1.0),
        (4, "check", 1.0),
        (1, "check", 0.0312),  # 1 / (8 x the bound), to three figures
    ]
    assert (result["replicas_1x"], result["replicas"], result["reason"]) == (None, None, reason)
    assert [(s["replicas"], s["kind"]) for s in result["searches"]] == [
        (1, "search"), (1, "check"), (2, "check"), (4, "check")
    ]  # fmt: skip


def test_a_bound_of_one(monkeypatch) -> None:
    table = Table(lambda n: 0.5 * n)
    result = sized(monkeypatch, table, bound=1)
    assert table.ran == [(1, "search", 1.0), (1, "check", 0.125)]
    assert result["reason"] == "needs more than 1 replicas (the bound)"


def test_no_check_far_below_the_traffic_once_a_count_holds_it(monkeypatch) -> None:
    table = Table(lambda n: 0.3 * n)  # four hold 1x; 1.5x is past the bound of four
    result = sized(monkeypatch, table, bound=4, headroom=0.5)
    assert (result["replicas_1x"], result["replicas"]) == (4, None)
    assert all(start >= 1.0 for _, _, start in table.ran)
    assert result["reason"] == "needs more than 4 replicas (the bound)"


def test_by_rate_one_replica_holds_the_level_its_search_was_given(monkeypatch) -> None:
    """At 12.34 requests/s the search starts at 12.3 (three figures, as its argv shows):
    one replica whose capacity is that start holds the traffic, though 12.3 / 12.34 < 1."""
    table = Table(lambda n: 12.3 * n, rate=12.34)
    result = sized(monkeypatch, table)
    assert table.ran == [(1, "search", 12.3)]
    assert result["replicas"] == 1
