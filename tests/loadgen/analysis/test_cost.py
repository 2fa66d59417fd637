"""$/Mtok from a GPU-hour price and J/token from power samples."""

from __future__ import annotations

import pytest

from loadgen.analysis import cost
from loadgen.analysis.records import GpuSample


def sample(at: float, gpu: str, power: float | None, energy: float | None = None) -> GpuSample:
    return GpuSample(at=at, source="s", gpu=gpu, memory_mib=None, power_w=power, energy_mj=energy)


def test_the_output_price_is_the_whole_hour_over_the_output_tokens() -> None:
    # 4 GPUs at $2/h = $8/h; 1,000 output tok/s; 4,000 input tok/s; 10% of time before TTFT
    block = cost.cost(2.0, 4, 4000.0, 1000.0, 0.1)
    assert block is not None
    assert block["usd_per_mtok_output"] == pytest.approx(8 / 3600 / 1000 * 1e6)
    assert "usd_per_mtok_input" not in block  # only the split prices input on its own


def test_the_split_by_time_before_the_first_token_is_named_apart() -> None:
    block = cost.cost(2.0, 4, 4000.0, 1000.0, 0.1)
    assert block is not None
    assert block["usd_per_mtok_output_split"] == pytest.approx(8 / 3600 * 0.9 / 1000 * 1e6)
    assert block["usd_per_mtok_input_split"] == pytest.approx(8 / 3600 * 0.1 / 4000 * 1e6)
    spent = block["usd_per_mtok_output_split"] * 1000 + block["usd_per_mtok_input_split"] * 4000
    assert spent / 1e6 == pytest.approx(8 / 3600)  # the two split prices add up to the hour
    assert cost.cost(2.0, 4, 4000.0, None, 0.1) is None


def test_an_answer_in_one_burst_does_not_make_output_tokens_free() -> None:
    # 99.8% of the time before the first token (the whole answer arrives at once): the
    # split prices output near zero, the quoted figure is still the hour over its tokens
    block = cost.cost(2.0, 4, 4000.0, 148.0, 0.998)
    assert block is not None
    assert block["usd_per_mtok_output"] == pytest.approx(15.0, rel=0.01)
    assert block["usd_per_mtok_output_split"] < 0.04


def test_energy_prefers_the_counter_and_falls_back_to_the_gauge() -> None:
    counted = [sample(0, "0", 999, 0), sample(10, "0", 1, 3_000_000)]  # 3 kJ in 10 s: 300 W
    gauged = [sample(0, "1", 200), sample(5, "1", 100)]
    block = cost.energy(counted + gauged, busy_s=10.0, output_tokens=10_000, goodput_per_s=4.5)
    assert block is not None
    assert block["mean_power_w"] == pytest.approx(450.0)
    assert block["joules_per_output_token"] == pytest.approx(0.45)
    assert block["goodput_per_watt"] == pytest.approx(0.01)
    assert block["source"] == "energy counter and power gauge"
    assert cost.energy([], 10.0, 10_000, 1.0) is None
    assert cost.energy(gauged, 10.0, 0, 1.0) is None
