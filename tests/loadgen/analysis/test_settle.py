"""When a warm-up has reached the level's steady state (settle.py), on synthetic in-flight
counts from the queue model of test_steady, and how a probe's summary carries it."""

from __future__ import annotations

import numpy as np

from loadgen.analysis import settle
from loadgen.analysis.records import Phase, Record, SummarySettings
from loadgen.analysis.summary import summarize
from tests.loadgen.analysis.test_steady import T0, open_loop, poisson


def counts(records: list[Record], until: float, every: float = 0.25) -> list[tuple[float, float]]:
    """The client's in-flight count (sent, not finished), sampled every `every` seconds."""
    times = np.arange(0.0, until, every)
    sent = np.array([r.intended_at - T0 for r in records])
    ended = np.array([r.end_at - T0 for r in records])
    return [(float(t), float(np.sum((sent <= t) & (ended > t)))) for t in times]


def first_settled(
    samples: list[tuple[float, float]], e2e_s: float, rate: float
) -> float | None:
    """The first moment the warm-up would have ended."""
    for i in range(len(samples)):
        if settle.settled([samples[: i + 1]], e2e_s, rate):
            return samples[i][0]
    return None


def test_a_level_that_keeps_up_settles_within_a_few_request_durations() -> None:
    # 8/s into 8 servers of 1 s each: about 8 in flight once the first answers come back
    records = open_loop(poisson(8, 0, 60, seed=5), 8, 1.0, 60)
    when = first_settled(counts(records, 60), e2e_s=1.0, rate=8)
    assert when is not None and 4 <= when <= 12  # two windows of 2 s, plus noise


def test_a_growing_queue_never_settles() -> None:
    # 12/s into a server finishing 10/s: the count grows by 2 every second
    records = open_loop(np.arange(0, 60, 1 / 12), 2, 0.2, 60)
    samples = counts(records, 60)
    assert first_settled(samples, e2e_s=0.5, rate=12) is None
    assert settle.growing(samples, settle.window_s(0.5), 12) is True


def test_a_slow_fill_is_not_settled_until_it_stops() -> None:
    # at 2 requests/s, the count climbs by 1 every second for 20 s, then holds
    samples = [(t / 4, min(t / 4, 20.0)) for t in range(4 * 40)]
    when = first_settled(samples, e2e_s=1.0, rate=2)
    assert when is not None and 20 < when <= 25


def test_nothing_is_told_before_two_windows_or_without_an_e2e() -> None:
    samples = [(t / 4, 5.0) for t in range(12)]  # 2.75 s of a flat count
    assert settle.growing(samples, 2.0, 5) is None
    assert settle.settled([samples], None, 5) is False  # no request finished yet
    flat = [(t / 4, 5.0) for t in range(40)]
    rising = [(t / 4, float(t)) for t in range(40)]
    assert settle.settled([flat], 1.0, 5) is True
    assert settle.settled([flat, rising], 1.0, 5) is False  # the server's count must settle too


def test_a_probe_summary_says_whether_its_warm_up_settled() -> None:
    records = open_loop(poisson(8, -2, 31, seed=6), 4, 0.25, 30)
    phase = Phase(target="a", block=0, start_at=T0, end_at=T0 + 30, warmup_s=30.0, settled=False)
    summary = summarize(records, [phase], [], [], SummarySettings(), "rate")
    state = summary["targets"]["a"]["steady_state"]
    assert state["settled"] is False and state["warmup_s"] == 30.0
    plain = Phase(target="a", block=0, start_at=T0, end_at=T0 + 30)
    state = summarize(records, [plain], [], [], SummarySettings(), "rate")["targets"]["a"]
    assert state["steady_state"]["settled"] is None  # a fixed warm-up tells nothing


def test_a_runaway_warm_up_ends_early_and_calls_the_level_saturated() -> None:
    # 20/s into a server finishing 10/s: 10 more in flight every second
    records = open_loop(np.arange(0, 60, 1 / 20), 2, 0.2, 60)
    samples = counts(records, 60)
    early = [s for s in samples if s[0] <= 1.5]
    assert not settle.ran_away(early, 0.2)  # too soon to tell
    when = next(t for t, _ in samples if settle.ran_away([s for s in samples if s[0] <= t], 0.2))
    assert when <= 4 * settle.MIN_WINDOW_S + 0.5  # as soon as it spans four windows
    filling = [(t / 4, min(t / 4, 20.0)) for t in range(4 * 40)]  # fills for 20 s, then holds
    assert not settle.ran_away(filling, 1.0)
    assert not settle.ran_away(filling[:80], None)  # nothing finished yet: a batch filling
    quarters = settle.quarters([s for s in samples if s[0] <= when])
    phase = Phase(target="a", block=0, start_at=T0, end_at=T0 + 30, warmup_s=when,
                  settled=False, warmup_in_flight=quarters)  # fmt: skip
    state = summarize(records, [phase], [], [], SummarySettings(), "rate")["targets"]["a"]
    assert state["steady_state"]["steady"] is False
    assert any("grew from" in r and "never settled" in r for r in state["steady_state"]["reasons"])
