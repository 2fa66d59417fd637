"""Which part of a load a request belongs to: warmup, measured or cooldown (pure).

Both engines apply this one rule, loadgen's blocks (runner.py) and Locust's nodes
(locust/window.py): a request intended before the warmup ends is excluded as "warmup"; one
intended once the measured window has closed is excluded as "cooldown"; load goes on until
every measured request has finished, so the last measured ones see the same load as the
others rather than a draining server — but for at most a drain (`drain_s`): a server that
fell behind would otherwise keep a run going for as long as its queue, however long the
window. Measured requests still running when the drain ends are ended there and recorded
as unfinished (records.UNFINISHED), as are the cooldown requests still running when the
block ends: every request sent is a record.
"""

from __future__ import annotations

WARMUP = "warmup"
COOLDOWN = "cooldown"
DRAIN_MIN_S = 30.0  # the default drain: as long as the window, and at least this


def drain_s(window_s: float, asked: float | None) -> float:
    """How long a window's requests may run on after it closed: `asked` (--drain), else as
    long as the window and at least DRAIN_MIN_S (a healthy request outlasts neither)."""
    return asked if asked is not None else max(window_s, DRAIN_MIN_S)


class Window:
    """A measured window in perf_counter seconds: [warm_end, closed_at)."""

    def __init__(self, warm_end: float, closed_at: float | None = None) -> None:
        self.warm_end = warm_end
        self.closed_at = closed_at  # None: still open
        self.in_flight = 0  # measured requests not finished yet
        self.done_at: float | None = None  # when the last measured one finished

    def take(self, intended: float) -> str | None:
        """Claim a request intended at this time: "warmup", None (measured) or "cooldown"."""
        if intended < self.warm_end:
            return WARMUP
        if self.closed_at is not None and intended >= self.closed_at:
            return COOLDOWN
        self.in_flight += 1
        return None

    def finished(self, excluded: str | None, end: float) -> None:
        if excluded is None:
            self.in_flight -= 1
            self.done_at = max(end, self.done_at or end)

    def close(self, at: float) -> None:
        """Nothing intended from `at` on is measured (never before the warmup's end)."""
        if self.closed_at is None:
            self.closed_at = max(at, self.warm_end)

    @property
    def drained(self) -> bool:
        """Closed, and no measured request is in flight."""
        return self.closed_at is not None and self.in_flight == 0
