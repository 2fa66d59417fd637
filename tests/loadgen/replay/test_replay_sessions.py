"""An agents' trace's call graph: which call waits for which, and the trace's hard cases
(cycles, parents that never answered or are not in the window, repeated ids), each with
one outcome and no call lost."""

from __future__ import annotations

import json

import pytest

from loadgen.replay import sessions
from loadgen.replay.formats import BadRow, TraceRecord, parse
from loadgen.replay.window import Arrival, schedule, share


def call(line: int, at: float, parent: str | None = None, session: str = "s") -> TraceRecord:
    return TraceRecord(line, at, 10, 2, call=f"c{line}", parent=parent, session=session)


def test_a_call_waits_for_its_parent_and_siblings_share_one() -> None:
    arrivals = schedule([call(1, 0), call(2, 1, "c1"), call(3, 2, "c2"), call(4, 2, "c2")])
    tree = sessions.graph(arrivals)
    assert [a.record.line for a in tree.roots] == [1]
    assert {k: [a.record.line for a in v] for k, v in tree.children.items()} == {1: [2], 2: [3, 4]}
    assert tree.meta() == {"sessions": 1, "linked": 3, "unlinked": 0}


def test_a_cycle_or_a_later_parent_holds_nothing_back() -> None:
    # c1 names c2, c2 names c1: the earliest is a root, the other follows it
    arrivals = schedule([call(1, 0, "c2"), call(2, 1, "c1"), call(3, 2, "c3")])  # c3: itself
    tree = sessions.graph(arrivals)
    assert [a.record.line for a in tree.roots] == [1, 3]
    assert tree.children == {1: [arrivals[1]]}
    assert tree.unlinked == 2
    assert sessions.measured(tree, 0.0) == 3  # every call is sent once


def test_a_parent_outside_the_window_or_never_answered_makes_a_root() -> None:
    lines = [
        {"logger": "latency_proxy.access", "msg": "request", "operation": "chat",
         "arrived_at": 10.0, "request_id": "p", "status": 502, "outcome": "upstream_error"},
        {"logger": "latency_proxy.access", "msg": "request", "operation": "chat",
         "arrived_at": 11.0, "request_id": "c", "input_tokens": 20, "output_tokens": 3,
         "session": "s", "parent": "p", "parent_gap_s": 0.5, "turn": 2,
         "prefix_blocks": ["aa", "bb"], "prompt_chars": 1500},
    ]  # fmt: skip
    parsed = parse("\n".join(json.dumps(x) for x in lines))
    assert parsed.unreplayable == 1
    (child,) = parsed.records
    assert (child.parent, child.gap_s, child.prefix_unit) == ("p", 0.5, "chars")
    tree = sessions.graph(schedule(parsed.records))
    assert tree.roots[0].record is child and tree.unlinked == 1


def test_a_repeated_id_is_its_first_call() -> None:
    arrivals = schedule([call(1, 0), TraceRecord(2, 1, 10, 2, call="c1"), call(3, 2, "c1")])
    tree = sessions.graph(arrivals)
    assert tree.children == {1: [arrivals[2]]}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("parent_gap_s", -1, "parent_gap_s is negative"),
        ("parent_gap_s", 1e6, "more than a day"),
        ("parent_gap_s", "soon", "parent_gap_s is not a number"),
        ("parent", 7, "parent must be a string"),
        ("turn", 0, "turn must be a whole number"),
        ("prefix_blocks", [1], "prefix_blocks must be a list of strings"),
    ],
)
def test_a_bad_session_field_is_a_bad_row_naming_it(field: str, value: object, says: str) -> None:
    line = {"logger": "latency_proxy.access", "msg": "request", "operation": "chat",
            "arrived_at": 1.0, "input_tokens": 5, "output_tokens": 2, "prompt_chars": 10,
            field: value}  # fmt: skip
    with pytest.raises(BadRow, match=says):
        parse(json.dumps(line))


def test_shards_keep_a_session_whole() -> None:
    records = [call(n, n, None if n % 4 == 1 else f"c{n - 1}", f"s{n // 4}") for n in range(1, 41)]
    arrivals = schedule(records)
    parts = [share(arrivals, i, 3) for i in range(3)]
    assert sorted(a.record.line for p in parts for a in p) == list(range(1, 41))
    for part in parts:
        held = {a.record.session for a in part}
        assert all(a.record.session in held for a in arrivals if a in part)
        assert not held & {a.record.session for p in parts if p is not part for a in p}


def test_only_an_agents_trace_has_dependencies() -> None:
    plain = schedule([TraceRecord(1, 0, 5, 2), TraceRecord(2, 1, 5, 2)])
    tree = sessions.graph(plain)
    assert len(tree.roots) == 2 and not tree.children
    assert [a.record.line for a in share(plain, 1, 2)] == [2]
    assert isinstance(plain[0], Arrival)


def test_sessions_a_minute_are_the_windows_sessions_over_its_length_times_the_speed() -> None:
    # two sessions (one with a call that continues a call outside the window) over 30 s
    arrivals = schedule([call(1, 0), call(2, 10, "c1"), call(3, 20, session="t"),
                         call(4, 30, "gone", session="t")])  # fmt: skip
    assert sessions.per_minute(arrivals, 1.0) == pytest.approx(4.0)
    assert sessions.per_minute(arrivals, 2.5) == pytest.approx(10.0)
    plain = schedule([TraceRecord(1, 0, 10, 2), TraceRecord(2, 5, 10, 2)])
    assert sessions.per_minute(plain, 1.0) is None  # no session to count
    assert sessions.per_minute(schedule([call(1, 3)]), 1.0) is None  # no length to start over
