"""Steady state or saturated, decided from synthetic record sets (steady.py, via summarize).

The records come from a small queue model: `servers` run at once, each request holds one for
`service_s` (its first token after PREFILL_S), the rest wait in arrival order — so a rate
above servers / service_s makes the queue, and TTFT, grow without end.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from loadgen.analysis import steady
from loadgen.analysis.records import UNFINISHED, Phase, Record, SummarySettings
from loadgen.analysis.slo import parse_slos
from loadgen.analysis.summary import summarize
from loadgen.capacity import verdict as probe_verdict
from loadgen.reports import run as report

T0 = 1_800_000_000.0
WARMUP_S = 2.0
PREFILL_S = 0.05


def record(i: int, intended: float, start: float, service_s: float, window_s: float) -> Record:
    at = T0 + intended
    excluded = "warmup" if intended < 0 else ("cooldown" if intended > window_s else None)
    return Record(
        request_id=str(i),
        target="a",
        intended_at=at,
        sent_at=at,
        end_at=T0 + start + service_s,
        send_lag_s=0.0,
        ok=True,
        excluded=excluded,
        level=1,
        ttft_s=start - intended + PREFILL_S,
        tpot_s=0.02,
        e2e_s=start + service_s - intended,
        output_tokens=16,
    )


def open_loop(
    arrivals: np.ndarray, servers: int, service_s: float, window_s: float
) -> list[Record]:
    """Requests intended at `arrivals` (s from the window's start), served first come first."""
    free = [float(arrivals.min())] * servers
    out = []
    for i, intended in enumerate(np.sort(arrivals)):
        start = max(float(intended), heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        out.append(record(i, float(intended), start, service_s, window_s))
    return out


def closed_loop(
    streams: int, servers: int, service_s: float, window_s: float, level: int
) -> list[Record]:
    """`streams` workers each sending again when their answer ends."""
    free = [-WARMUP_S] * servers
    due = [(-WARMUP_S + k * 0.01, k) for k in range(streams)]
    out = []
    while due:
        intended, worker = heapq.heappop(due)
        start = max(intended, heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        out.append(record(len(out), intended, start, service_s, window_s))
        out[-1].level = level
        if intended <= window_s:
            heapq.heappush(due, (start + service_s, worker))
    return out


def window(window_s: float, level: float = 1) -> list[Phase]:
    return [Phase(target="a", block=0, start_at=T0, end_at=T0 + window_s, level=level)]


def verdict(records: list[Record], window_s: float) -> dict:
    summary = summarize(records, window(window_s), [], [], SummarySettings(), "rate")
    return summary["targets"]["a"]["steady_state"]


def poisson(rate: float, start: float, end: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, size=int((end - start) * rate * 2) + 10)
    times = start + np.cumsum(gaps)
    return times[times < end]


def test_below_capacity_is_steady() -> None:
    # 8 requests/s into 4 servers of 0.25 s each (16/s): the queue stays short
    records = open_loop(poisson(8, -WARMUP_S, 31, seed=1), 4, 0.25, 30)
    state = verdict(records, 30)
    assert state["steady"] is True and state["reasons"] == []
    assert state["arrival_per_s"] == pytest.approx(8, rel=0.15)
    assert state["completion_per_s"] == pytest.approx(state["arrival_per_s"], rel=0.05)
    low, high = state["ttft_slope_ci95"]
    assert low <= 0 <= high


def test_a_linearly_growing_queue_is_saturated() -> None:
    # 15/s into a server finishing 10/s: each second adds 5 to the queue, and a request
    # waits half a second longer than the one sent a second before it (15/10 - 1)
    arrivals = np.arange(-WARMUP_S, 21, 1 / 15)
    records = open_loop(arrivals, 2, 0.2, 20)
    state = verdict(records, 20)
    assert state["steady"] is False
    assert state["arrival_per_s"] == pytest.approx(15, rel=0.02)
    assert state["completion_per_s"] == pytest.approx(10, rel=0.05)
    low, high = state["ttft_slope_ci95"]
    assert low <= 0.5 <= high and state["ttft_slope"] == pytest.approx(0.5, rel=0.05)
    assert state["ttft_last_third_s"] > 2 * state["ttft_first_third_s"]
    assert state["in_flight_end"] > state["in_flight_start"] + 90
    text = "; ".join(state["reasons"])
    assert "requests arrived at 15.0/s and completed at 10." in text
    assert "TTFT grew 0.50 s every second" in text
    assert "still waiting or in flight when the measured window closed" in text


def test_a_burst_that_drains_is_steady() -> None:
    # a steady 5/s with 40 requests at once 6 s in: the queue spikes, then drains in ~2 s
    steady_part = poisson(5, -WARMUP_S, 21, seed=2)
    records = open_loop(np.concatenate([steady_part, np.full(40, 6.0)]), 4, 0.2, 20)
    assert max(r.ttft_s for r in records) > 1.5  # the burst did queue
    state = verdict(records, 20)
    assert state["steady"] is True, state["reasons"]


def test_closed_loop_past_the_batch_limit_queues() -> None:
    # 8 sequences run at once, 0.5 s each: 16 requests/s whatever the concurrency beyond 8
    levels = (2, 4, 8, 16, 32)
    records = [r for c in levels for r in closed_loop(c, 8, 0.5, 20, c)]
    phases = [p for c in levels for p in window(20, c)]
    summary = summarize(records, phases, [], [], SummarySettings(), "concurrency")
    states = {p["level"]: p["targets"]["a"]["steady_state"] for p in summary["sweep"]["points"]}
    assert [states[c]["steady"] for c in levels] == [True, True, True, False, False]
    assert "concurrency 16 is beyond what the server runs at once" in states[16]["reasons"][0]
    assert "req/s at 8," in states[16]["reasons"][0] and "(+0%)" in states[16]["reasons"][0]
    # within one closed-loop level nothing grows: the queue is bounded by the streams
    assert states[32]["reasons"] == [states[32]["reasons"][0]]
    assert summary["targets"]["a"]["steady_state"] == states[32]  # the top level's, as ever


def test_server_gauges_add_their_evidence() -> None:
    records = open_loop(poisson(8, -WARMUP_S, 31, seed=3), 4, 0.25, 30)
    phases = window(30)
    quiet = steady.judge(records, phases, 30, True, {"waiting": {"start": 0, "end": 1}})
    assert quiet["steady"] is True and quiet["server"] == {"waiting": {"start": 0, "end": 1}}
    queued = steady.judge(
        records, phases, 30, True, {"waiting": {"start": 2, "end": 40}, "preemptions": 3}
    )
    assert queued["steady"] is False
    assert queued["reasons"] == [
        "the server's waiting queue grew from 2 to 40 requests",
        "the server preempted 3 requests (its KV cache was full)",
    ]
    closed = steady.judge(records, phases, 30, False, {"waiting": {"start": 6, "end": 9}})
    assert "more streams than it runs at once" in closed["reasons"][0]
    herd = steady.judge(records, phases, 30, False, {"waiting": {"start": 2, "end": 6}})
    assert herd["steady"] is True  # a few waiting for a prefill at one instant


def test_t95_matches_students_t() -> None:
    for dof, exact in ((3, 3.182), (10, 2.228), (30, 2.042), (1000, 1.962)):
        assert steady.t95(dof) == pytest.approx(exact, rel=0.01)


def test_saturated_percentiles_are_labelled_where_shown() -> None:
    records = open_loop(np.arange(-WARMUP_S, 21, 1 / 15), 2, 0.2, 20)
    summary = summarize(records, window(20), [], [], SummarySettings(), "rate")
    console = report.console_table(summary)
    assert console.splitlines()[2].rstrip().endswith("SATURATED")  # the table's column
    assert "a: SATURATED: the server fell behind the load: requests arrived at 15.0/s" in console
    assert "these percentiles grow with the run's length" in console
    text = report.markdown(summary, {}, [])
    assert "**Saturated: the server fell behind the load: requests arrived at 15.0/s" in text
    assert "| metric (ms, saturated) |" in text
    calm = summarize(
        open_loop(poisson(8, -WARMUP_S, 31, 4), 4, 0.25, 30),
        window(30),
        [],
        [],
        SummarySettings(),
        "rate",
    )
    assert "saturated" not in report.markdown(calm, {}, []).lower()



def replayed(
    arrivals: np.ndarray, tokens: np.ndarray, servers: int, decode_s: float, drain_s: float
) -> list[Record]:
    """A trace's requests on a queue model whose prefill grows with the prompt (0.1 ms a
    token); the window is the trace's span, and those not done drain_s after it are cut."""
    window_s = float(arrivals.max())
    free = [0.0] * servers
    out = []
    for i, (intended, n) in enumerate(zip(arrivals, tokens, strict=True)):
        start = max(float(intended), heapq.heappop(free))
        prefill = PREFILL_S + 0.0001 * float(n)
        heapq.heappush(free, start + prefill + decode_s)
        r = record(i, float(intended), start, prefill + decode_s, window_s)
        r.ttft_s, r.input_tokens = start - intended + prefill, int(n)
        if r.end_at > T0 + window_s + drain_s:
            r.ok, r.error, r.end_at = False, UNFINISHED, T0 + window_s + drain_s
            r.ttft_s = r.tpot_s = r.e2e_s = None
        out.append(r)
    return out


def judged_replay(records: list[Record], replay: bool) -> dict:
    window_s = max(r.intended_at for r in records) - T0
    phase = Phase(target="a", block=0, start_at=T0, end_at=T0 + window_s, level=1, drain_s=30)
    return steady.judge(records, [phase], window_s, open_loop=True, replay=replay)


def test_a_replay_whose_prompts_grow_and_arrivals_bunch_at_the_end_is_steady() -> None:
    """Far from its limit, TTFT rises with the trace's prompts and requests are in flight at
    the window's close (the arrivals bunch there): neither is the server falling behind."""
    rng = np.random.default_rng(5)
    arrivals = np.sort(np.concatenate([rng.uniform(0, 30, 40), rng.uniform(30, 34, 30)]))
    tokens = np.linspace(200, 8000, len(arrivals)).astype(int)
    records = replayed(arrivals, tokens, servers=64, decode_s=3.0, drain_s=30)
    as_rate = judged_replay(records, replay=False)
    assert not as_rate["steady"]  # the TTFT trend and the in-flight tail misjudge it
    state = judged_replay(records, replay=True)
    assert state["steady"], state["reasons"]
    assert state["in_flight_end"] >= 20 and state["unfinished"] == 0
    assert probe_verdict.verdict(_probe(state), SLOS).outcome == probe_verdict.MEETS


def test_a_saturated_replay_is_still_saturated() -> None:
    """The same kind of trace on a server with two slots: completions fall behind arrivals
    so far that the drain cannot make up for it."""
    rng = np.random.default_rng(5)
    arrivals = np.sort(rng.uniform(0, 60, 120))
    tokens = rng.integers(200, 8000, len(arrivals))
    records = replayed(arrivals, tokens, servers=2, decode_s=3.0, drain_s=30)
    state = judged_replay(records, replay=True)
    assert not state["steady"]
    assert state["reasons"][0].startswith(f"{state['unfinished']} of the window's 120 requests")


SLOS = parse_slos(["ttft=1s@p90", "tpot=1s@p90"])


def _probe(state: dict) -> dict:
    """A probe's summary whose SLOs hold by far: only its steady state can tell."""
    block = {"p90": 0.1, "ci95": {"p90": [0.05, 0.2]}, "count": 100}
    return {
        "valid": True,
        "metrics": {"ttft_s": block, "tpot_s": block},
        "steady_state": state,
        "requests": {"ok": 100, "failed": 0},
    }
