"""The simulated GPUs' busy time, power and energy, step by step, for the DCGM-style gauges.

Every GPU of a tensor-parallel group works in lockstep, so one account serves them all. A
step's power comes from the performance model (what share of the datasheet FLOP/s and
bandwidth it reaches); between steps a GPU draws its idle power. Utilization and power are
means over the last UTIL_WINDOW (DCGM samples about as long); energy is a counter since the
simulator started, as dcgm-exporter's total-energy field, so a client that reads it twice
gets the exact energy in between. A step's energy is counted when it is scheduled, at most
one step ahead of its end.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from loadgen.sim.model.roofline import Hardware

UTIL_WINDOW = 1.0  # seconds


class GpuMeter:
    def __init__(self, hardware: Hardware, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle = hardware.idle_watts
        self._clock = clock
        self._started = clock()
        self._steps: deque[tuple[float, float, float]] = deque()  # (end, duration, watts)
        self._above_idle_joules = 0.0

    def add(self, end: float, duration: float, watts: float) -> None:
        """A step that ends at `end` (monotonic seconds), drawing `watts` per GPU."""
        self._steps.append((end, duration, watts))
        self._above_idle_joules += (watts - self._idle) * duration

    def _recent(self) -> tuple[float, list[tuple[float, float]]]:
        """The window's start and its steps as (seconds inside the window, watts)."""
        start = self._clock() - UTIL_WINDOW
        while self._steps and self._steps[0][0] <= start:
            self._steps.popleft()
        return start, [(min(d, end - start), w) for end, d, w in self._steps]

    @property
    def utilization(self) -> float:
        """Busy fraction of the last UTIL_WINDOW seconds."""
        _, steps = self._recent()
        return min(1.0, sum(seconds for seconds, _ in steps) / UTIL_WINDOW)

    @property
    def power(self) -> float:
        """Mean watts per GPU over the last UTIL_WINDOW seconds."""
        _, steps = self._recent()
        above = sum(seconds * (watts - self._idle) for seconds, watts in steps)
        return self._idle + above / UTIL_WINDOW

    @property
    def energy_joules(self) -> float:
        """Joules per GPU since the simulator started."""
        return self._idle * (self._clock() - self._started) + self._above_idle_joules
