"""A virtual request's stream as a client sees it: when its content events arrive.

The twin tells an observer (sim/twin/cluster.py's Observer) of every step and the sequences that
sampled in it; a sequence says when the step released a chunk (sim/model/sequence.py: the first
token at once, then every `--stream-interval` tokens, and the rest at its end), and that is
an event. A record keeps what a real client's keeps of them: the gaps (itl_s, their largest,
stalls, the share of bursts) and the time to its FIRST_N-th token. Times are one float per
event, as a real record's gaps are.
"""

from __future__ import annotations

from array import array
from itertools import pairwise
from typing import Any

from latency_proxy.measure.coalescing import coalesced_fraction
from loadgen.analysis.records import FIRST_N
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.twin.cluster import Sampled


class Stream:
    """The observer: each request's event times, by its index in the twin's requests."""

    def __init__(self) -> None:
        self.events: dict[int, array[float]] = {}
        self.nth: dict[int, float] = {}  # when the event holding its FIRST_N-th token came

    def __call__(
        self, _replica: int, _batch: Batch, _step: StepTime, now: float, sampled: Sampled
    ) -> None:
        for seq, _gap in sampled:
            if seq.released != seq.generated:
                continue  # sampled, but not the end of a chunk
            i = seq.index
            times = self.events.get(i)
            if times is None:
                times = self.events[i] = array("d")
            times.append(now)
            if i not in self.nth and seq.generated >= FIRST_N:
                self.nth[i] = now

    def fields(
        self, index: int, arrival: float, end: float, tpot: float | None, stall_s: float
    ) -> dict[str, Any]:
        """The record's stream fields for events up to `end` (a request cut at the drain
        keeps those before the cut)."""
        times = [t for t in self.events.get(index, ()) if t <= end]
        if not times:
            return {}
        gaps = [b - a for a, b in pairwise(times)]
        nth = self.nth.get(index)
        return {
            "itl_s": gaps,
            "max_itl_s": max(gaps, default=None),
            "stalls": sum(1 for gap in gaps if gap > stall_s),
            "coalesced_fraction": coalesced_fraction(gaps, tpot),
            "ttfnt_s": {str(FIRST_N): nth - arrival} if nth is not None and nth <= end else {},
        }
