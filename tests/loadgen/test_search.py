"""The capacity search without a server: probe sizes, a probe's verdict, bracket then bisect,
and capacity.json's closing sentence."""

from __future__ import annotations

from html import unescape

import pytest

from loadgen.capacity import command as capacity
from loadgen.capacity import report as capacity_report
from loadgen.capacity.search import Search, bounded_samples, probe_requests, verdict
from loadgen.slo import Slos, parse_slos


def test_probe_size_is_what_the_percentile_needs() -> None:
    assert [bounded_samples(p) for p in (0.5, 0.9, 0.99)] == [6, 36, 368]
    assert probe_requests(parse_slos(["ttft=800ms@p90", "tpot=50ms@p90"]), None) == 36
    assert probe_requests(parse_slos(["ttft=800ms"]), None) == 368  # P99 when not given
    assert probe_requests(parse_slos(["ttft=1s@p50", "tpot=1s@p50"]), None) == 30  # trend floor
    assert probe_requests(parse_slos(["ttft=800ms@p90"]), 150) == 150
    with pytest.raises(ValueError, match="cannot judge TTFT at P99: it needs at least 100"):
        probe_requests(parse_slos(["ttft=800ms@p99"]), 50)


def search_for(knee: float, by: str = "rate", start: float = 1.0) -> Search:
    """A search against a server that meets exactly up to `knee`."""
    search = Search(by, start)
    while (level := search.next_level()) is not None:
        search.record(level, level <= knee)
        assert len(search.tried) < 30
    return search


def test_bracket_then_bisect_to_within_ten_percent() -> None:
    search = search_for(3.3)
    assert [lvl for lvl, _ in search.tried[:3]] == [1, 2, 4]  # doubling until one fails
    assert search.passing <= 3.3 < search.failing
    assert search.failing - search.passing <= 0.1 * search.passing and search.converged
    down = search_for(0.3, start=2)
    assert [lvl for lvl, _ in down.tried[:4]] == [2, 1, 0.5, 0.25]  # halving until one meets
    assert down.passing <= 0.3 < down.failing
    streams = search_for(37, by="concurrency")
    assert streams.passing <= 37 < streams.failing and streams.converged
    assert all(lvl == int(lvl) for lvl, _ in streams.tried)
    assert (search_for(3, by="concurrency").passing, search_for(3, by="concurrency").failing) == (
        3,
        4,
    )  # neighbours: as close as streams get
    nothing = search_for(0.01, start=1)
    assert nothing.passing is None and nothing.failing == 0.125  # gave up at start / 8


def test_a_pass_above_a_failure_does_not_raise_the_capacity() -> None:
    search = Search("rate", 1)
    for level, meets in ((1, True), (2, True), (4, False), (3, False), (3.5, True)):
        search.record(level, meets)
    assert (search.passing, search.failing) == (2, 3)


def target(ttft_p90: float, tpot_p90: float, steady: bool = True, failed: int = 0) -> dict:
    return {
        "metrics": {
            "ttft_s": {"p90": ttft_p90, "p99": None},
            "tpot_s": {"p90": tpot_p90, "p99": None},
        },
        "steady_state": {
            "steady": steady,
            "reasons": [] if steady else ["requests arrived at 10.0/s and completed at 3.1/s"],
        },
        "valid": True,
        "invalid_reasons": [],
        "requests": {"ok": 100 - failed, "failed": failed},
    }


def test_a_probe_meets_when_every_slo_holds_and_it_is_steady() -> None:
    slos = parse_slos(["ttft=800ms@p90", "tpot=50ms@p90"])
    assert verdict(target(0.5, 0.03), slos).meets
    missed = verdict(target(1.2, 0.03), slos)
    assert not missed.meets and missed.failures == ["TTFT P90 1.20 s > 800 ms"]
    assert missed.ratios == pytest.approx({"ttft": 1.5, "tpot": 0.6})
    saturated = verdict(target(0.5, 0.03, steady=False), slos)
    assert not saturated.meets and saturated.failures[0].startswith("saturated: requests")
    assert not verdict(target(0.5, 0.03, failed=2), slos).meets  # 2% failed
    unsure = verdict(target(0.5, 0.03), parse_slos(["ttft=800ms@p99"]))
    assert not unsure.meets and unsure.failures[0] == "TTFT P99: too few samples"


def probe(number: int, level: float, meets: bool, ttft: float, tokens: float) -> dict:
    return {
        "number": number,
        "level": level,
        "meets": meets,
        "steady": True,
        "valid": True,
        "interrupted": False,
        "failures": [] if meets else ["TTFT P90 …"],
        "ratios": {"ttft": ttft / 0.8, "tpot": 0.5},
        "requests_per_s": level,
        "output_tokens_per_s": tokens,
        "ttft_s": {"p90": ttft},
        "tpot_s": {"p90": 0.025},
        "run_dir": f"probe-{number:02d}",
    }


def test_the_closing_sentence_names_capacities_and_headroom(tmp_path) -> None:
    slos = Slos({"ttft": 0.8, "tpot": 0.05}, {"ttft": "p90", "tpot": "p90"})
    found = {
        "llama-70b": [probe(1, 2.6, True, 0.7, 660), probe(3, 2.8, False, 0.9, 700)],
        "qwen-72b": [probe(2, 3.1, True, 0.6, 790), probe(4, 3.4, False, 1.0, 850)],
    }
    result = {
        "command": "python -m loadgen capacity …",
        "by": "rate",
        "slo": {m: {"limit_s": v, "percentile": "p90"} for m, v in slos.limits.items()},
        "probe_requests": 36,
        "warmup_s": 2,
        "budget_s": 900,
        "elapsed_s": 300,
        "stopped": "bracket",
        "targets": {
            name: {
                "by": "rate",
                "capacity": probes[0]["level"],
                "bracket": [probes[0]["level"], probes[1]["level"]],
                "converged": True,
                "output_tokens_per_s": probes[0]["output_tokens_per_s"],
                "requests_per_s": probes[0]["level"],
                "binding": "ttft",
                "reason": None,
                "probes": probes,
            }
            for name, probes in found.items()
        },
    }
    assert capacity_report.sentence(result) == (
        "At TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90), qwen-72b sustains 3.1 req/s "
        "(790 output tok/s) and llama-70b 2.6 req/s; at 2.6 req/s qwen-72b still has 19% headroom."
    )
    text = capacity_report.markdown(result)
    assert "For llama-70b, TTFT binds first: P90 900 ms at 2.8 req/s, against 800 ms." in text
    assert text.rstrip().endswith("against 800 ms.")
    capacity_report.write(tmp_path, result)
    assert (tmp_path / "capacity.png").stat().st_size > 1000
    page = unescape((tmp_path / "report.html").read_text())
    assert capacity_report.sentence(result) in page  # the verdict, in report.md's words
    assert "For llama-70b, TTFT binds first: P90 900 ms at 2.8 req/s, against 800 ms." in page
    assert '<a href="probe-01/report.html">probe-01</a>' in page


def test_by_concurrency_a_level_that_only_adds_waiting_is_saturated() -> None:
    def streams(level: int, rate: float, ttft_p50: float) -> dict:
        state = {"steady": True, "reasons": []}
        return {"level": level, "interrupted": False, "meets": True, "steady": True,
                "failures": [], "requests_per_s": rate, "ttft_s": {"p50": ttft_p50},
                "steady_state": state}  # fmt: skip

    probes = [streams(4, 10.0, 0.1), streams(8, 19.0, 0.11)]
    capacity._queueing(probes[-1], probes)
    assert probes[-1]["meets"] is True  # twice the streams, nearly twice the throughput
    probes.append(streams(16, 19.5, 0.3))
    capacity._queueing(probes[-1], probes)
    assert probes[-1]["meets"] is False and probes[-1]["steady_state"]["steady"] is False
    assert probes[-1]["failures"][0].startswith("saturated: concurrency 16 is beyond")
