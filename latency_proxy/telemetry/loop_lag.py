"""The proxy's own event-loop lag: how late the loop runs a timer that is due every
`PROBE_INTERVAL_S`.

A proxy short of CPU queues work it then measures as the server's TTFT and TPOT; the lag
says how much of a figure is the proxy's own. Each probe goes into the
`latency_proxy.event_loop.lag` histogram and into a ring, so a request can be told the
largest lag seen while it was in flight without any work per chunk: it takes a mark as it
arrives and asks for the worst since as it ends (a scan of at most one block of probes and
then one maximum per block).
"""

from __future__ import annotations

import asyncio
import time

from latency_proxy.telemetry.instruments import Instrument

PROBE_INTERVAL_S = 0.01  # Node's monitorEventLoopDelay resolution; ~0.05% of a core here
RING = 65536  # probes kept: ~11 minutes, longer than most streams
BLOCK = 64  # probes per kept maximum
_BLOCKS = RING // BLOCK


class LoopLag:
    """The periodic probe of one event loop, and the maximum over any recent span of it."""

    def __init__(self, histogram: Instrument) -> None:
        self._histogram = histogram
        self._lags = [0.0] * RING
        self._block_max = [0.0] * _BLOCKS
        self._count = 0  # probes taken
        self._due = 0.0  # perf_counter time the next probe is due
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._schedule(time.perf_counter())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def mark(self) -> int:
        """Where a request begins: pass it to `worst_since` as the request ends."""
        return self._count

    def worst_since(self, mark: int) -> float:
        """The largest lag since `mark`, the probe now overdue included (the loop may have
        been held up just before this call)."""
        worst = max(0.0, time.perf_counter() - self._due) if self._timer is not None else 0.0
        count = self._count
        start = max(mark, count - RING)
        if start >= count:
            return worst
        block = start // BLOCK
        head = min(count, (block + 1) * BLOCK) - start
        first = start % RING
        worst = max(worst, *self._lags[first : first + head])
        for later in range(block + 1, (count - 1) // BLOCK + 1):
            worst = max(worst, self._block_max[later % _BLOCKS])
        return worst

    def _schedule(self, now: float) -> None:
        self._due = now + PROBE_INTERVAL_S
        self._timer = asyncio.get_running_loop().call_later(PROBE_INTERVAL_S, self._probe)

    def _probe(self) -> None:
        now = time.perf_counter()
        self.observe(max(0.0, now - self._due))  # uvloop's ms timers may fire a little early
        self._schedule(now)

    def observe(self, lag: float) -> None:
        """Keep one probe's lag, in the ring and the histogram."""
        count = self._count
        self._lags[count % RING] = lag
        slot = (count // BLOCK) % _BLOCKS
        if count % BLOCK == 0 or lag > self._block_max[slot]:
            self._block_max[slot] = lag
        self._count = count + 1
        self._histogram.record(lag, ())
