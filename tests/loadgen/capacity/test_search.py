"""The capacity search without a server: probe sizes, a probe's three-way verdict, bracket
then bisect on decided probes, and capacity.json's closing sentence."""

from __future__ import annotations

from html import unescape

import pytest

from loadgen.analysis.slo import Slos, parse_slos
from loadgen.capacity.advice import sentence
from loadgen.capacity.axis import AXES
from loadgen.capacity.search import Search, bounded_samples, crossing, probe_requests
from loadgen.capacity.verdict import FAILS, MEETS, UNDECIDED, verdict
from loadgen.commands import capacity
from loadgen.commands.cli import main
from loadgen.reports import capacity as capacity_report


def test_probe_size_is_what_the_percentile_needs() -> None:
    assert [bounded_samples(p) for p in (0.5, 0.9, 0.99)] == [6, 36, 368]
    assert probe_requests(parse_slos(["ttft=800ms@p90", "tpot=50ms@p90"]), None) == 36
    assert probe_requests(parse_slos(["ttft=800ms"]), None) == 368  # P99 when not given
    assert probe_requests(parse_slos(["ttft=1s@p50", "tpot=1s@p50"]), None) == 30  # trend floor
    assert probe_requests(parse_slos(["ttft=800ms@p90"]), 150) == 150
    with pytest.raises(ValueError, match="cannot judge TTFT at P99: it needs at least 100"):
        probe_requests(parse_slos(["ttft=800ms@p99"]), 50)


def search_for(
    knee: float, by: str = "rate", start: float = 1.0, unsure: float = 0.0
) -> Search:
    """A search against a server that meets exactly up to `knee`; levels within `unsure`
    (relative) of it stay undecided however long they are probed."""
    search = Search(AXES[by], start)
    while (level := search.next_level()) is not None:
        near = abs(level / knee - 1) < unsure
        search.record(level, UNDECIDED if near else (MEETS if level <= knee else FAILS))
        assert len(search.tried) < 30
    return search


def test_bracket_then_bisect_to_within_five_percent() -> None:
    search = search_for(3.3)
    assert [lvl for lvl, _ in search.tried[:3]] == [1, 2, 4]  # doubling until one fails
    assert search.passing <= 3.3 < search.failing
    assert search.failing - search.passing <= 0.05 * search.passing and search.converged
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


def test_a_floor_at_the_start_asks_only_whether_it_holds_and_how_far_above() -> None:
    """--floor START: a start that does not meet (fails, or stays undecided) ends the search
    at that one probe; one that meets is searched above as without a floor."""
    for outcome in (FAILS, UNDECIDED):
        search = Search(AXES["speed"], 1.0, floor=1.0)
        assert search.next_level() == 1.0
        search.record(1.0, outcome)
        assert search.next_level() is None and search.passing is None
    floored, free = Search(AXES["speed"], 1.0, floor=1.0), Search(AXES["speed"], 1.0)
    for search in (floored, free):
        while (level := search.next_level()) is not None:
            search.record(level, MEETS if level <= 1.3 else FAILS)
    assert floored.tried == free.tried and floored.passing is not None
    assert floored.passing <= 1.3 < floored.failing
    low = Search(AXES["rate"], 4, floor=0.1)  # a floor below start / 8: halves further
    while (level := low.next_level()) is not None:
        low.record(level, MEETS if level <= 0.2 else FAILS)
    assert low.passing is not None and low.passing <= 0.2 < low.failing


def test_a_ceiling_caps_the_doubling_and_at_the_start_checks_one_level() -> None:
    capped = Search(AXES["speed"], 1.0, ceiling=3.0)
    while (level := capped.next_level()) is not None:
        capped.record(level, MEETS)
    assert [lvl for lvl, _ in capped.tried] == [1, 2, 3] and capped.failing is None
    for outcome in (MEETS, FAILS, UNDECIDED):
        one = Search(AXES["speed"], 1.0, floor=1.0, ceiling=1.0)
        assert one.next_level() == 1.0
        one.record(1.0, outcome)
        assert one.next_level() is None and len(one.tried) == 1
        assert one.passing == (1.0 if outcome == MEETS else None)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--start", "2", "--floor", "3"], "--floor 3 is above --start 2"),
        (["--start", "2", "--ceiling", "1"], "--ceiling 1 is below --start 2"),
    ],
)
def test_a_floor_above_or_a_ceiling_below_the_start_is_refused(capsys, flags, said) -> None:
    argv = ["capacity", "--target", "virtual:llama-70b-awq-tp4-a100", "--slo", "ttft=1s@p90"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, *flags])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_a_pass_above_a_failure_does_not_raise_the_capacity() -> None:
    search = Search(AXES["rate"], 1)
    for level, outcome in ((1, MEETS), (2, MEETS), (4, FAILS), (3, FAILS), (3.5, MEETS)):
        search.record(level, outcome)
    assert (search.passing, search.failing) == (2, 3)


def test_undecided_levels_bracket_nothing_but_stop_the_bisection_below_them() -> None:
    search = Search(AXES["rate"], 1)
    for level, outcome in ((1, MEETS), (2, MEETS), (4, UNDECIDED)):
        search.record(level, outcome)
    assert (search.passing, search.failing, search.undecided) == (2, None, [4])
    assert search.next_level() == 3  # bisects below the undecided level, not past it
    near = search_for(3.3, unsure=0.03)  # 3.3 ± 3% never decides
    assert near.failing is not None and near.passing < 3.3 * 0.97
    assert near.converged and all(3.2 <= u <= 3.4 for u in near.undecided)
    stuck = Search(AXES["concurrency"], 4)
    stuck.record(4, UNDECIDED)
    assert stuck.next_level() == 2 and stuck.passing is None  # halves below it


def target(
    ttft: tuple[float, float, float],
    tpot: tuple[float, float, float] = (0.03, 0.028, 0.032),
    steady: bool = True,
    failed: int = 0,
    **state: object,
) -> dict:
    """A probe's summary block: each SLO metric's P90 as (value, CI low, CI high)."""

    def block(figures: tuple[float, float, float]) -> dict:
        value, low, high = figures
        return {"p90": value, "p99": None, "ci95": {"p90": [low, high], "p99": None}}

    return {
        "metrics": {"ttft_s": block(ttft), "tpot_s": block(tpot)},
        "steady_state": {
            "steady": steady,
            "reasons": [] if steady else ["requests arrived at 10.0/s and completed at 3.1/s"],
            "settled": True,
            "warmup_s": 4.0,
            **state,
        },
        "valid": True,
        "invalid_reasons": [],
        "requests": {"ok": 100 - failed, "failed": failed},
    }


SLOS = parse_slos(["ttft=800ms@p90", "tpot=50ms@p90"])


def test_a_probe_meets_only_when_every_interval_lies_under_its_limit_and_it_is_steady() -> None:
    meets = verdict(target((0.5, 0.45, 0.7)), SLOS)
    assert meets.outcome == MEETS and meets.failures == meets.unsure == []
    assert meets.intervals["ttft"] == {
        "value": 0.5, "ci95": [0.45, 0.7], "limit": 0.8, "side": "under"
    }  # fmt: skip
    straddles = verdict(target((0.75, 0.7, 0.85)), SLOS)  # P90 under the limit, CI across it
    assert straddles.outcome == UNDECIDED and straddles.failures == []
    assert straddles.unsure == [
        "TTFT P90 750 ms [700 ms, 850 ms] against 800 ms: its interval straddles the limit"
    ]
    above = verdict(target((0.95, 0.85, 1.1)), SLOS)
    assert above.outcome == FAILS
    assert above.failures == ["TTFT P90 950 ms [850 ms, 1.10 s] against 800 ms"]
    assert above.ratios == pytest.approx({"ttft": 0.95 / 0.8, "tpot": 0.6})
    unbounded = verdict(target((0.7, 0.6, None)), SLOS)  # too few requests for an upper bound
    assert unbounded.outcome == UNDECIDED
    sure_miss = verdict(target((1.0, 0.9, 1.2), tpot=(0.045, 0.04, 0.06)), SLOS)
    assert sure_miss.outcome == FAILS  # one sure miss fails whatever the others straddle


def test_saturation_errors_and_the_client_fail_a_probe_whatever_its_intervals() -> None:
    saturated = verdict(target((0.5, 0.45, 0.7), steady=False), SLOS)
    assert saturated.outcome == FAILS and saturated.failures[0].startswith("saturated: requests")
    assert verdict(target((0.5, 0.45, 0.7), failed=2), SLOS).outcome == FAILS  # 2% failed
    too_few = verdict(target((0.5, 0.45, 0.7)), parse_slos(["ttft=800ms@p99"]))
    assert too_few.outcome == UNDECIDED and too_few.unsure[0] == "TTFT P99: too few samples"


def test_a_probe_whose_steadiness_cannot_be_told_is_undecided() -> None:
    unsettled = verdict(target((0.5, 0.45, 0.7), settled=False, warmup_s=30.0), SLOS)
    assert unsettled.outcome == UNDECIDED
    assert unsettled.unsure == [
        "the warm-up ended after 30 s with the in-flight count still growing"
    ]
    rising = target(
        (0.5, 0.45, 0.7),
        ttft_slope_ci95=[0.002, 0.01],
        ttft_first_third_s=0.30,
        ttft_last_third_s=0.40,
    )
    assert verdict(rising, SLOS).outcome == UNDECIDED  # a trend too small to call saturation
    jitter = {**rising["steady_state"], "ttft_last_third_s": 0.31}  # significant but tiny
    assert verdict({**rising, "steady_state": jitter}, SLOS).outcome == MEETS


def test_the_capacity_figure_interpolates_where_the_binding_slo_crosses_its_limit() -> None:
    low = {"level": 7.0, "ratios": {"ttft": 0.3, "tpot": 0.9}}
    high = {"level": 8.0, "ratios": {"ttft": 0.4, "tpot": 1.1}}
    assert crossing(low, high) == pytest.approx(7.5)
    saturated = {"level": 8.0, "ratios": {"ttft": 0.5, "tpot": 0.95}}
    assert crossing(low, saturated) is None  # saturation, not an SLO, ends the range


def probe(number: int, level: float, meets: bool, ttft: float, tokens: float) -> dict:
    return {
        "number": number,
        "level": level,
        "outcome": MEETS if meets else FAILS,
        "meets": meets,
        "steady": True,
        "settled": True,
        "warmup_s": 5.0,
        "window_s": 20.0,
        "valid": True,
        "interrupted": False,
        "failures": [] if meets else ["TTFT P90 …"],
        "unsure": [],
        "ratios": {"ttft": ttft / 0.8, "tpot": 0.5},
        "intervals": {"ttft": {"value": ttft, "ci95": [ttft - 0.05, ttft + 0.05],
                               "limit": 0.8, "side": "under" if meets else "above"}},
        "requests": 100,
        "requests_per_s": level,
        "output_tokens_per_s": tokens,
        "ttft_s": {"p90": ttft},
        "tpot_s": {"p90": 0.025},
        "run_dir": f"probe-{number:02d}",
        "seed": number,
        "extension": 0,
        "extends": None,
        "extended": False,
        "repeat": None,
    }  # fmt: skip


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
        "settle_max_s": 30,
        "window_e2es": 10,
        "max_extensions": 2,
        "precision": 0.05,
        "budget_s": 900,
        "elapsed_s": 300,
        "stopped": "bracket",
        "targets": {
            name: {
                "by": "rate",
                "capacity": probes[0]["level"],
                "bracket": [probes[0]["level"], probes[1]["level"]],
                "converged": True,
                "undecided": [],
                "repeat": None,
                "output_tokens_per_s": probes[0]["output_tokens_per_s"],
                "requests_per_s": probes[0]["level"],
                "binding": "ttft",
                "reason": None,
                "probes": probes,
            }
            for name, probes in found.items()
        },
    }
    capacity_report.upgrade(result)  # a capacity.json from before binding_slo
    assert result["targets"]["llama-70b"]["binding_slo"] == {
        "metric": "ttft", "percentile": "p90", "limit_s": 0.8, "value_s": 0.9, "level": 2.8
    }  # fmt: skip
    said = sentence(result)
    assert said == (
        "At TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90), qwen-72b sustains 3.1 req/s "
        "(790 output tok/s) before TTFT P90 passes 800 ms (1.00 s at 3.4 req/s); llama-70b "
        "sustains 2.6 req/s before TTFT P90 passes 800 ms (900 ms at 2.8 req/s); at 2.6 req/s "
        "qwen-72b still has 19% headroom."
    )
    text = capacity_report.markdown(result)
    assert "| 0.7 [650.0, 750.0] under |" not in text  # milliseconds, not seconds
    assert "| 700.0 [650.0, 750.0] under |" in text  # the interval against the limit
    assert text.rstrip().endswith(said)
    capacity_report.write(tmp_path, result)
    assert (tmp_path / "capacity.png").stat().st_size > 1000
    page = unescape((tmp_path / "report.html").read_text())
    assert said in page  # the verdict, in report.md's words
    assert '<a href="probe-01/report.html">probe-01</a>' in page


def test_by_concurrency_a_level_that_only_adds_waiting_is_saturated() -> None:
    def streams(level: int, rate: float, ttft_p50: float) -> dict:
        state = {"steady": True, "reasons": []}
        return {"level": level, "interrupted": False, "meets": True, "steady": True,
                "outcome": MEETS, "failures": [], "requests_per_s": rate,
                "ttft_s": {"p50": ttft_p50}, "steady_state": state}  # fmt: skip

    probes = [streams(4, 10.0, 0.1), streams(8, 19.0, 0.11)]
    capacity._queueing(probes[-1], probes)
    assert probes[-1]["meets"] is True  # twice the streams, nearly twice the throughput
    probes.append(streams(16, 19.5, 0.3))
    capacity._queueing(probes[-1], probes)
    assert probes[-1]["outcome"] == FAILS and probes[-1]["steady_state"]["steady"] is False
    assert probes[-1]["failures"][0].startswith("saturated: concurrency 16 is beyond")


def test_repeats_report_whether_the_bracket_held_and_the_spread_of_the_figure() -> None:
    search = Search(AXES["rate"], 1)
    search.record(7.0, MEETS)
    search.record(8.0, FAILS)

    def at(number: int, level: float, outcome: str, tpot: float, repeat: int | None) -> dict:
        return {**probe(number, level, outcome == MEETS, 0.3, 100), "outcome": outcome,
                "ratios": {"ttft": 0.4, "tpot": tpot}, "repeat": repeat}  # fmt: skip

    probes = [
        at(1, 7.0, MEETS, 0.9, None),
        at(2, 8.0, FAILS, 1.1, None),
        at(3, 7.0, MEETS, 0.8, 1),
        at(4, 8.0, FAILS, 1.2, 1),
        at(5, 7.0, UNDECIDED, 1.0, 2),  # the lower end straddled its limit this time
        at(6, 8.0, FAILS, 1.4, 2),
    ]
    rep = capacity_report._repeats(probes, search)
    assert [r["agrees"] for r in rep["runs"]] == [True, False] and rep["agree"] == 1
    assert rep["runs"][1]["outcomes"] == {"7": UNDECIDED, "8": FAILS}
    assert [r["crossing"] for r in rep["runs"]] == pytest.approx([7.5, 7.0])
    assert rep["crossing_spread"] == pytest.approx([7.0, 7.5])


def test_a_client_that_fell_behind_only_blurs_the_intervals_lower_ends() -> None:
    def blurred(ttft: tuple[float, float, float]) -> dict:
        lag = {"p50": 0.005, "p99": 0.03}
        return {**target(ttft), "valid": False, "invalid_reasons": ["client event-loop lag …"],
                "client": {"send_lag_s": {"p99": 0.001}, "loop_lag_s": lag}}  # fmt: skip

    assert verdict(blurred((0.5, 0.45, 0.7)), SLOS).outcome == MEETS  # lag only adds
    assert verdict(blurred((0.95, 0.85, 1.1)), SLOS).outcome == FAILS  # 850 - 30 ms > 800
    close = verdict(blurred((0.95, 0.82, 1.1)), SLOS)  # 820 - 30 ms: it may be under
    assert close.outcome == UNDECIDED and "widened by the client's 30 ms lag" in close.unsure[0]
