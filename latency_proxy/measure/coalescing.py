"""Is a stream arriving as it was generated, or in bursts that something held back?

An intermediary that buffers a stream (a proxy with buffering on, a gateway reading whole
bodies) releases many events at once: their gaps collapse to almost nothing while the
stream's own time per token stays what the server produced. ITL and TPOT measured behind it
describe the buffer, not the server. A server that sends several tokens per event (vLLM's
`--stream-interval`) is different: its gaps are regular and larger, not collapsed.

One definition for the proxy (what it receives from upstream) and loadgen (what the client
receives), so a user can tell on which side of the proxy the buffering happens. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COALESCED_GAP_S = 0.001  # a gap under 1 ms ...
TPOT_SHARE = 0.1  # ... and under a tenth of the stream's own time per token is a burst
BUFFERED_SHARE = 0.5  # a target is buffered when half its gaps are bursts
CHUNKED_TOKENS = 1.5  # more tokens per event than this on average is a chunked stream


def coalesced_gap(tpot: float) -> float:
    """The gap below which two content events count as released together."""
    return min(COALESCED_GAP_S, tpot * TPOT_SHARE)


def coalesced_count(gaps: Sequence[float], tpot: float | None) -> int | None:
    """How many gaps between content events are bursts; None when the stream has no TPOT."""
    if not gaps or tpot is None or tpot <= 0:
        return None
    threshold = coalesced_gap(tpot)
    return sum(1 for gap in gaps if gap < threshold)


def buffered(fraction: float | None) -> bool:
    """Whether a stream (or a target's streams) with this share of bursts arrived buffered."""
    return fraction is not None and fraction >= BUFFERED_SHARE


def coalesced_fraction(gaps: Sequence[float], tpot: float | None) -> float | None:
    """The share of gaps between content events that are bursts (None: cannot tell)."""
    count = coalesced_count(gaps, tpot)
    return None if count is None else count / len(gaps)


@dataclass(frozen=True, slots=True)
class StreamShape:
    """How a target's streams arrived, over all its measured requests."""

    buffered: bool | None  # None: no request had two or more content events
    coalesced_fraction: float | None  # bursts / gaps, pooled over requests
    tokens_per_event: float | None  # output tokens / content events, pooled
    gap_s: float | None  # mean gap between content events
    verdict: str


Stream = tuple[Sequence[float], float | None, int | None]  # gaps, TPOT, output tokens


def stream_shape(streams: Iterable[Stream]) -> StreamShape:
    """The verdict over (gaps, tpot, output tokens) of each request's stream."""
    gaps_total = bursts = tokens = events = 0
    gap_sum = 0.0
    for gaps, tpot, output_tokens in streams:
        count = coalesced_count(gaps, tpot)
        if count is None:
            continue
        gaps_total += len(gaps)
        bursts += count
        gap_sum += sum(gaps)
        if output_tokens:
            tokens += output_tokens
            events += len(gaps) + 1
    if not gaps_total:
        return StreamShape(None, None, None, None, "too few content events to tell")
    fraction = bursts / gaps_total
    per_event = tokens / events if events else None
    gap = gap_sum / gaps_total
    if buffered(fraction):
        verdict = (
            f"streams arrive in bursts: {fraction:.0%} of events within "
            f"{COALESCED_GAP_S * 1e3:g} ms of the previous one — an intermediary is buffering; "
            "ITL and TPOT from this client are not the server's"
        )
    elif per_event is not None and per_event > CHUNKED_TOKENS:
        verdict = f"chunked stream: {per_event:.3g} tokens per event every {gap * 1e3:.3g} ms"
    else:
        verdict = f"event by event: one event every {gap * 1e3:.3g} ms"
    return StreamShape(buffered(fraction), fraction, per_event, gap, verdict)
