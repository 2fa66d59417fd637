"""The simulated GPUs' account: utilization, power and energy from the steps alone."""

from __future__ import annotations

import pytest

from loadgen.sim.model import presets
from loadgen.sim.model.gpus import UTIL_WINDOW, GpuMeter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_energy_is_idle_time_plus_each_steps_power_over_its_duration() -> None:
    hw = presets.load("llama-70b-awq-tp4-a100").perf.hardware
    clock = Clock()
    meter = GpuMeter(hw, clock)
    clock.now += 2.0
    assert meter.energy_joules == pytest.approx(2.0 * hw.idle_watts)
    assert meter.power == hw.idle_watts and meter.utilization == 0
    meter.add(clock.now + 0.25, 0.25, 300.0)
    meter.add(clock.now + 0.5, 0.25, 200.0)
    clock.now += 0.5
    above_idle = 0.25 * (300 - hw.idle_watts) + 0.25 * (200 - hw.idle_watts)
    expected = 2.5 * hw.idle_watts + above_idle
    assert meter.energy_joules == pytest.approx(expected)
    assert meter.utilization == pytest.approx(0.5 / UTIL_WINDOW)
    assert meter.power == pytest.approx(hw.idle_watts + above_idle / UTIL_WINDOW)
    clock.now += 2 * UTIL_WINDOW  # the steps leave the window, not the counter
    assert meter.power == hw.idle_watts
    assert meter.energy_joules == pytest.approx(expected + 2 * UTIL_WINDOW * hw.idle_watts)
