"""One Locust node's measured window: loadgen's rule (loadgen/engine/window.py), closed when the
test stops, then sealed once its measured requests have finished (pure)."""

from __future__ import annotations

from loadgen.analysis.records import Phase
from loadgen.engine import window
from loadgen.engine.measurement import Clock


class Window(window.Window):
    """A node's window in perf_counter seconds; `busy` counts requests of every kind."""

    def __init__(self, start: float, warmup_s: float) -> None:
        super().__init__(start + warmup_s)
        self.sealed = False  # no request may start any more
        self.busy = 0  # requests of any kind not finished yet
        self.drain_s: float | None = None  # set as the window closes

    def take(self, intended: float) -> str | None:
        assert not self.sealed, "a sealed window takes no request"
        self.busy += 1
        return super().take(intended)

    def finished(self, excluded: str | None, end: float) -> None:
        self.busy -= 1
        super().finished(excluded, end)

    @property
    def idle(self) -> bool:
        """Sealed, and nothing is in flight: every request is a record."""
        return self.sealed and self.busy == 0

    def phase(self, target: str, clock: Clock, level: float | None = None) -> Phase:
        assert self.closed_at is not None, "a window becomes a phase once closed"
        return Phase(
            target=target,
            block=0,
            level=level,
            start_at=clock.epoch(self.warm_end),
            end_at=clock.epoch(self.closed_at),
            done_at=clock.epoch(self.done_at or self.closed_at),
            drain_s=self.drain_s,
        )
