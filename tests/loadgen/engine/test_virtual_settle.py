"""A settling warm-up read off the twin's timings, as the runner would have seen it live: a
light level settles soon after its ramp; one far past the knee never does, and its in-flight
count is seen running away (the steady-state judge then calls it saturated)."""

from __future__ import annotations

import numpy as np

from loadgen.analysis import settle
from loadgen.analysis.settle import Settle
from loadgen.engine.virtual_settle import closes, warm_up
from loadgen.sim import twin
from loadgen.sim.model import presets

RULE = Settle(max_s=30.0, window_e2es=10.0, max_window_s=120.0)


def timings(rate: float, seconds: float) -> list[twin.Timing]:
    gaps = np.random.default_rng(3).exponential(1 / rate, int(rate * seconds))
    requests = [twin.Request(float(a), 128, 8) for a in np.cumsum(gaps)]
    return twin.run(presets.load("llama-70b-awq-tp4-a100"), requests).timings


def test_a_light_level_settles_after_its_ramp_and_measures_enough() -> None:
    light = timings(5.0, 100.0)
    opened = warm_up(light, RULE, ramp=1.0)
    assert opened.settled and 1.0 <= opened.at < 10.0 and opened.e2e_s is not None
    close, measured = closes(light, opened, RULE, duration=None, requests=144)
    # ten typical E2Es is under a second here: the count of requests sets the window
    assert measured == 144 and close > opened.at + 20


def test_a_level_past_the_knee_never_settles() -> None:
    opened = warm_up(timings(60.0, 40.0), RULE, ramp=1.0)
    assert not opened.settled and opened.quarters is not None
    assert settle.runaway(*opened.quarters)
