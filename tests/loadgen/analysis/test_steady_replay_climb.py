"""A replay whose completions fall behind its arrivals while its TTFT climbs is saturated
even with no server gauges to read (a live server without --server-metrics), and its
throughput is what completed, not what arrived; either sign alone follows the trace's shape
(tests/loadgen/analysis/test_steady.py keeps that case steady)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.analysis.records import Phase, SummarySettings
from loadgen.analysis.summary import summarize
from tests.loadgen.analysis.test_steady import T0, replayed


def test_a_replay_falling_behind_with_ttft_climbing_is_saturated() -> None:
    # 4/s into one slot of 0.43 s (2.3/s): the drain (long) lets every request finish
    arrivals = np.sort(np.random.default_rng(3).uniform(0, 100, 400))
    tokens = np.full(len(arrivals), 500)
    records = replayed(arrivals, tokens, servers=1, decode_s=0.33, drain_s=1000)
    assert all(r.ok for r in records)
    window_s = float(arrivals.max())
    phase = Phase(target="a", block=0, start_at=T0, end_at=T0 + window_s, level=1, drain_s=1000)
    summary = summarize(records, [phase], [], [], SummarySettings(), "replay")
    target = summary["targets"]["a"]
    state = target["steady_state"]
    assert state["steady"] is False, state
    text = "; ".join(state["reasons"])
    assert "completed at 2.3/s" in text and "TTFT grew" in text
    assert target["throughput"]["requests_per_s"] == pytest.approx(2.3, rel=0.05)
    assert target["throughput"]["output_tokens_per_s"] == pytest.approx(2.3 * 16, rel=0.05)
