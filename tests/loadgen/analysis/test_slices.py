"""Time slices of a run from records made here: counts, backlog, tokens spread over decode,
per-slice percentiles, the worst slice named, each slice's SLO verdicts and the sentence
saying them, and the summary key behind --slice."""

from __future__ import annotations

import pytest

from loadgen.analysis.records import Phase, Record, SummarySettings
from loadgen.analysis.slices import clock, min_requests, sentence, slo_sentence, worst
from loadgen.analysis.slices import slices as sliced
from loadgen.analysis.slo import parse_slos
from loadgen.analysis.summary import summarize

SLOS = parse_slos(["ttft=500ms@p90", "tpot=50ms@p90"])


def slices(records: list[Record], phases: list[Phase], slice_s: float, slos=SLOS) -> list[dict]:
    return sliced(records, phases, slice_s, slos)


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
    calm = [rec(100.0 + i * 0.09, 0.05, 0.3) for i in range(11)]
    storm = [rec(102.0 + i * 0.09, 0.8, 1.0) for i in range(10)]
    few = [rec(103.0 + i * 0.1, 5.0, 5.2) for i in range(9)]  # too few for a P90: not worst
    found = slices(calm + storm + few, PHASE, 1.0)
    assert worst(found)["start_s"] == 2.0
    target = {"slices": found, "metrics": {"ttft_s": {"p90": 0.4}}}
    line = sentence("a", target)
    assert line.startswith("a: worst slice 0:02–0:03: TTFT P90 800 ms, 2.0x the run's (10 sent")


def test_summary_has_slices_only_when_asked() -> None:
    records = [rec(100.0 + i * 0.3, 0.1, 0.4) for i in range(10)]
    plain = summarize(records, PHASE, [], [], SummarySettings())
    assert "slices" not in plain["targets"]["a"]
    cut = summarize(records, PHASE, [], [], SummarySettings(slice_s=2.0))
    found = cut["targets"]["a"]["slices"]
    assert sum(s["sent"] for s in found) == 10 and found[0]["end_s"] == 2.0


def burst(at: float, n: int, ttft: float, tokens: int = 10) -> list[Record]:
    """n requests sent 0.09 s apart from `at`, each with this TTFT and a 10 ms TPOT."""
    return [rec(at + i * 0.09, ttft, ttft + 0.01 * (tokens - 1), tokens) for i in range(n)]


def test_each_slice_is_judged_at_each_slos_percentile() -> None:
    records = burst(100.0, 10, 0.1) + burst(101.0, 10, 0.9) + burst(102.0, 4, 2.0)
    records += burst(103.0, 10, 0.2)
    found = slices(records, PHASE, 1.0)
    verdicts = [(s["start_s"], s["slo"]["ttft"]["verdict"], s["slo_verdict"]) for s in found]
    assert verdicts[:4] == [
        (0.0, "pass", "pass"),
        (1.0, "fail", "fail"),
        (2.0, "not judged", "not judged"),  # 4 requests: a P90 needs 10
        (3.0, "pass", "pass"),
    ]
    ttft = found[1]["slo"]["ttft"]
    assert ttft == {"percentile": "p90", "limit_s": 0.5, "value_s": pytest.approx(0.9),
                    "count": 10, "min_requests": 10, "verdict": "fail"}  # fmt: skip
    assert found[1]["slo"]["tpot"]["verdict"] == "pass"
    assert min_requests("p50") == 5 and min_requests("p99") == 100  # one rule, every percentile


def test_an_slo_at_p99_judges_only_slices_of_a_hundred_requests() -> None:
    records = [rec(100.0 + i * 0.009, 0.1, 0.2) for i in range(100)]
    records += [rec(101.0 + i * 0.02, 0.1, 0.2) for i in range(40)]
    found = slices(records, PHASE, 1.0, parse_slos(["ttft=500ms"]))  # P99 by default
    assert [s["slo"]["ttft"]["verdict"] for s in found[:2]] == ["pass", "not judged"]
    only_few = {"slices": found[1:]}
    assert slo_sentence("a", only_few) == (
        "a: no slice had enough requests to judge the SLOs by (TTFT P99 needs 100; the most "
        "sent in one was 40): a longer --slice or an SLO at a lower percentile would"
    )


def test_the_sentence_names_failing_stretches_compactly() -> None:
    records = []
    ttfts = [0.1, 0.9, 1.2, 0.1, 0.7, 0.1, 0.1, 0.1]
    phases = [Phase(target="a", block=0, start_at=100.0, end_at=580.0, done_at=581.0)]
    for k, ttft in enumerate(ttfts):  # one-minute slices, 10 requests each
        records += burst(100.0 + 60 * k, 10, ttft)
    records += burst(100.0 + 60 * 8, 3, 0.1)
    found = slices(records, phases, 60.0)
    assert slo_sentence("a", {"slices": found}) == (
        "a: SLOs held in 5 of 9 slices; TTFT P90 failed in 1:00–3:00 (2 slices, worst 1,200 ms "
        "> 500 ms) and 4:00–5:00 (700 ms > 500 ms); 1 not judged (fewer than 10 requests)"
    )


def test_beyond_three_stretches_the_rest_are_counted() -> None:
    records = []
    for k in range(10):  # every other slice fails
        records += burst(100.0 + 2 * k, 10, 0.9 if k % 2 else 0.1)
    phases = [Phase(target="a", block=0, start_at=100.0, end_at=120.0, done_at=121.0)]
    said = slo_sentence("a", {"slices": slices(records, phases, 2.0)})
    assert said == (
        "a: SLOs held in 5 of 10 slices; TTFT P90 failed in 0:02–0:04 (900 ms > 500 ms), "
        "0:06–0:08 (900 ms > 500 ms), 0:10–0:12 (900 ms > 500 ms) and 2 more stretches "
        "(2 slices)"
    )


def test_clock() -> None:
    assert [clock(t) for t in (0, 2.5, 59, 630, 3720)] == ["0:00", "0:02.5", "0:59", "10:30",
                                                         "1:02:00"]  # fmt: skip
