"""The buffering detector on synthetic streams: paced, burst-released, chunked, too short."""

from __future__ import annotations

import pytest

from latency_proxy.measure.coalescing import coalesced_fraction, stream_shape


def paced(n: int, gap: float) -> list[float]:
    return [gap] * (n - 1)


def bursts(n: int, per_burst: int, gap: float) -> list[float]:
    """n events released per_burst at a time, a burst every per_burst * gap seconds."""
    return [per_burst * gap if (i + 1) % per_burst == 0 else 0.00005 for i in range(n - 1)]


def tpot_of(gaps: list[float], tokens: int) -> float:
    return sum(gaps) / (tokens - 1)


def test_a_paced_stream_has_no_bursts() -> None:
    gaps = paced(64, 0.03)
    assert coalesced_fraction(gaps, tpot_of(gaps, 64)) == 0.0


def test_a_buffered_stream_is_mostly_bursts() -> None:
    gaps = bursts(64, 16, 0.03)
    fraction = coalesced_fraction(gaps, tpot_of(gaps, 64))
    assert fraction is not None and fraction > 0.9


def test_gaps_of_a_very_fast_server_are_judged_against_its_own_tpot() -> None:
    gaps = paced(64, 0.0004)  # 0.4 ms per token: under 1 ms, but not a burst
    assert coalesced_fraction(gaps, tpot_of(gaps, 64)) == 0.0


@pytest.mark.parametrize("gaps, tpot", [([], 0.02), ([0.02], None), ([0.02], 0.0)])
def test_no_verdict_without_gaps_or_tpot(gaps: list[float], tpot: float | None) -> None:
    assert coalesced_fraction(gaps, tpot) is None


def test_target_verdicts() -> None:
    paced_streams = [(paced(32, 0.02), 0.02, 32)] * 5
    shape = stream_shape(paced_streams)
    assert shape.buffered is False and shape.tokens_per_event == 1
    assert shape.verdict == "event by event: one event every 20 ms"

    gaps = bursts(64, 16, 0.03)
    shape = stream_shape([(gaps, tpot_of(gaps, 64), 64)] * 5)
    assert shape.buffered is True
    assert shape.verdict.startswith("streams arrive in bursts: 95% of events within 1 ms")

    chunked = paced(11, 0.06)  # --stream-interval 3: 3 tokens per event every 60 ms
    shape = stream_shape([(chunked, 0.02, 33)] * 3)
    assert shape.buffered is False and shape.tokens_per_event == 3
    assert shape.verdict == "chunked stream: 3 tokens per event every 60 ms"


def test_no_verdict_from_streams_without_gaps() -> None:
    shape = stream_shape([([], None, 1), ([], None, None)])
    assert shape.buffered is None and shape.coalesced_fraction is None
    assert shape.verdict == "too few content events to tell"
