"""Time slices of a run from records made here: counts, backlog, tokens spread over decode,
per-slice percentiles, the worst slice named, and the summary key behind --slice."""

from __future__ import annotations

import pytest

from loadgen.records import Phase, Record, SummarySettings
from loadgen.slices import sentence, slices, worst
from loadgen.summary import summarize


def rec(at: float, ttft: float, e2e: float, tokens: int = 10, **more: object) -> Record:
    return Record(
        request_id=f"r{at}",
        target="a",
        intended_at=at,
        sent_at=at,
        end_at=at + e2e,
        send_lag_s=0.0,
        ok=True,
        ttft_s=ttft,
        tpot_s=(e2e - ttft) / (tokens - 1),
        e2e_s=e2e,
        output_tokens=tokens,
        **more,
    )


PHASE = [Phase(target="a", block=0, start_at=100.0, end_at=104.0, done_at=105.0)]


def test_sent_finished_and_backlog_per_slice() -> None:
    records = [
        rec(100.0, 0.1, 0.5),
        rec(100.5, 0.1, 2.0),
        rec(101.2, 0.2, 0.3),
        rec(103.0, 1.0, 1.5),
    ]
    found = slices(records, PHASE, 1.0)
    assert [s["start_s"] for s in found] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [s["sent"] for s in found] == [2, 1, 0, 1, 0]
    assert [s["finished"] for s in found] == [1, 1, 1, 0, 1]
    assert [s["backlog"] for s in found] == [1, 1, 0, 1, 0]
    assert found[0]["ttft_s"] == {"p50": pytest.approx(0.1), "p90": pytest.approx(0.1), "count": 2}
    assert found[2]["ttft_s"]["count"] == 0


def test_output_tokens_are_spread_over_each_decode() -> None:
    # 10 tokens decoded from 100.5 to 102.5: half in slice 1, a quarter in slices 0 and 2
    found = slices([rec(100.0, 0.5, 2.5)], PHASE, 1.0)
    assert [s["output_tokens_per_s"] for s in found] == pytest.approx([2.5, 5.0, 2.5])
    assert sum(s["output_tokens_per_s"] for s in found) == pytest.approx(10)


def test_excluded_records_and_idle_slices_are_left_out() -> None:
    phases = [*PHASE, Phase(target="a", block=1, start_at=110.0, end_at=111.0, done_at=111.5)]
    records = [rec(100.2, 0.1, 0.2), rec(100.0, 9.0, 9.5, excluded="warmup"), rec(110.1, 0.1, 0.2)]
    found = slices(records, phases, 1.0)
    assert [s["start_s"] for s in found] == [0.0, 10.0]  # another target's time in between
    assert [s["sent"] for s in found] == [1, 1]


def test_the_worst_slice_is_the_highest_ttft_p90_with_enough_requests() -> None:
    calm = [rec(100.0 + i * 0.1, 0.05, 0.3) for i in range(8)]
    storm = [rec(102.0 + i * 0.1, 0.8, 1.0) for i in range(6)]
    lone = [rec(103.5, 5.0, 5.2)]  # one very slow request: too few to call a slice worst
    found = slices(calm + storm + lone, PHASE, 1.0)
    assert worst(found)["start_s"] == 2.0
    target = {"slices": found, "metrics": {"ttft_s": {"p90": 0.4}}}
    line = sentence("a", target)
    assert line.startswith("a: worst slice 2–3 s: TTFT P90 800 ms, 2.0x the run's (6 sent")


def test_summary_has_slices_only_when_asked() -> None:
    records = [rec(100.0 + i * 0.3, 0.1, 0.4) for i in range(10)]
    plain = summarize(records, PHASE, [], [], SummarySettings())
    assert "slices" not in plain["targets"]["a"]
    sliced = summarize(records, PHASE, [], [], SummarySettings(slice_s=2.0))
    found = sliced["targets"]["a"]["slices"]
    assert sum(s["sent"] for s in found) == 10 and found[0]["end_s"] == 2.0
