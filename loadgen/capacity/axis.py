"""What a capacity search turns up: the axis of load its levels are on. Pure.

Everything that differs between searching requests/s and searching streams is here: how a
level is written down, the lowest worth trying, when two levels are as close as the axis
allows, how a probe's load is driven (the run's sweep kind), and whether a closed loop's
queueing has to be judged across levels, and whether a level is a multiple of some given
traffic (a capacity under 1 then asks for more replicas). A new axis is one more entry in AXES.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLOOR = 1 / 8  # halve down to this share of the start level, then give up


@dataclass(frozen=True, slots=True)
class Axis:
    name: str  # --by
    unit: str  # in sentences: "3 req/s", "12 concurrent streams"
    short_unit: str  # in progress lines
    whole: bool  # levels are whole numbers (streams)
    open_loop: bool  # arrivals on a schedule: a server that falls behind queues without end
    sweep: str  # the run's sweep kind a probe of this axis is driven as
    amount_format: str  # a level in a sentence: "3.1 req/s", "1.7x"
    relative: bool = False  # levels are multiples of a given traffic (1: as recorded)

    def amount(self, level: float) -> str:
        return self.amount_format.format(level)

    def level(self, value: float) -> float:
        """A level as a person would write it down: whole streams, 3 significant digits."""
        if self.whole:
            return float(max(1, math.floor(value)))
        return float(f"{value:.3g}")

    def floor(self, start: float) -> float:
        """The lowest level a search halves down to."""
        return 1.0 if self.whole else start * FLOOR

    def neighbours(self, low: float, high: float) -> bool:
        """Nothing lies between the two levels on this axis."""
        return self.whole and high - low <= 1


AXES = {
    "rate": Axis(
        "rate",
        "req/s",
        "req/s",
        whole=False,
        open_loop=True,
        sweep="rate",
        amount_format="{:g} req/s",
    ),
    "concurrency": Axis(
        "concurrency",
        "concurrent streams",
        "streams",
        whole=True,
        open_loop=False,
        sweep="concurrency",
        amount_format="{:g} concurrent streams",
    ),
    # a --replay's window at a multiple of its own speed (open loop: its arrivals are a schedule)
    "speed": Axis(
        "speed",
        "x the trace's speed",
        "x",
        whole=False,
        open_loop=True,
        sweep="replay",
        amount_format="{:g}x",
        relative=True,
    ),
}
