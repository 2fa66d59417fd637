"""A block's budget: the shared window rule (window.py), its settling warm-up, its drain,
and when the block is over."""

from __future__ import annotations

import asyncio
import time

from loadgen.analysis.server_metrics import Snapshot
from loadgen.engine.schedule import Block
from loadgen.engine.window import COOLDOWN, WARMUP, Window, drain_s


class Budget(Window):
    """A block's window, and when the block is over: after its duration, or once its count
    of measured requests was taken, and none of them is in flight (cooldown requests then
    in flight are cut and recorded as unfinished) — or its drain ended, and those still in
    flight were cut."""

    def __init__(
        self, block: Block, start: float, ramp: float, drain: float | None = None
    ) -> None:
        super().__init__(start + ramp)
        self.block = block
        self.start = start
        self.drain = drain  # --drain; None: window.drain_s's default
        self.cut = False  # the drain ended: measured requests still running are unfinished
        self.remaining = block.requests or 0
        self._window(start + ramp, block.duration_s)
        self.interrupted = False
        self.settled: bool | None = None  # a settling warm-up's outcome
        self.warmup_in_flight: tuple[float, float] | None = None  # ... its quarters, unsettled
        self.opened = asyncio.Event()  # the measured window is open
        self.over = asyncio.Event()
        self.closing: list[Snapshot] = []  # the servers as the measured window closed

    def _window(self, opens_at: float, duration_s: float | None) -> None:
        self.warm_end = opens_at
        self.end = opens_at + duration_s if duration_s is not None else None
        self.closed_at = self.end  # when the last measured request was due

    def open(self, at: float, settled: bool, e2e_s: float | None) -> None:
        """A settling warm-up ends now: the window lasts its own time, and at least its
        settle's share of typical E2Es (at most its cap), whichever is longer."""
        settle_ = self.block.settle
        assert settle_ is not None
        self._window(at, settle_.window(self.block.duration_s, e2e_s))
        self.settled = settled
        self.opened.set()

    @property
    def drain_s(self) -> float | None:
        """How long measured requests may run on after the window closed; None while the
        window is still taking measured requests."""
        if self.remaining or self.closed_at is None:
            return None
        return drain_s(self.closed_at - self.warm_end, self.drain)

    def drain_ends(self) -> float | None:
        """When the drain ends (perf_counter seconds); None while not yet known."""
        drain = self.drain_s
        return None if drain is None or self.closed_at is None else self.closed_at + drain

    def take(self, intended: float) -> str | None:
        """Claim a request intended at this time: "warmup", None (measured) or "cooldown".

        The measured part lasts its time and its count of requests, whichever ends later."""
        if intended < self.warm_end:
            return WARMUP
        timed = self.end is not None and intended < self.end
        if timed or self.remaining > 0:
            self.in_flight += 1
            if self.remaining > 0:
                self.remaining -= 1
                if not self.remaining and not timed:
                    self.closed_at = intended
            return None
        self.check()
        return COOLDOWN

    def finished(self, excluded: str | None, end: float | None = None) -> None:
        super().finished(excluded, time.perf_counter() if end is None else end)
        if excluded is None:
            self.check()

    def interrupt(self) -> None:
        """End the block now: nothing more is due, nothing in flight is waited for."""
        if self.over.is_set():
            return
        now = max(time.perf_counter(), self.warm_end)  # a block cut in its warmup measured nothing
        self.interrupted = True
        if self.closed_at is None or self.closed_at > now:
            self.closed_at = now
        self.done_at = now
        self.over.set()

    def check(self) -> None:
        """End the block once the measured part is over and none of it is in flight."""
        timed_out = self.end is None or time.perf_counter() >= self.end
        exhausted = timed_out and not self.remaining
        if exhausted and self.in_flight == 0 and not self.over.is_set():
            self.done_at = time.perf_counter()  # before cancelling cooldown requests
            self.over.set()
