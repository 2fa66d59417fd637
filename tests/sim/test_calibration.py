"""The simulator's presets against published measurements, replayed on a virtual clock."""

from __future__ import annotations

import dataclasses

from loadgen.sim import calibration, presets


def test_qwen_72b_bf16_follows_qwens_speed_benchmark_within_10_percent() -> None:
    points = calibration.qwen_speed()
    assert [p.published for p in points] == list(calibration.QWEN_SPEED.values())
    off = [p for p in points if abs(p.error) > calibration.TOLERANCE]
    assert not off, off
    speeds = [p.simulated for p in points]
    assert speeds[-1] < 0.75 * speeds[0]  # prefill and KV reads: long inputs are slower


def test_a_model_that_forgot_the_kv_reads_would_fail_the_check() -> None:
    preset = presets.load("qwen-72b-bf16-tp4-a100")
    model = dataclasses.replace(preset.perf.model, kv_cache_bytes=0.2)  # KV reads 1/10
    blind = dataclasses.replace(preset, perf=dataclasses.replace(preset.perf, model=model))
    longest = calibration.qwen_speed(blind)[-1]
    assert longest.error > calibration.TOLERANCE


def test_llama_2_70b_tpot_under_load_follows_lmdeploys_benchmark_within_its_band() -> None:
    loads = calibration.lmdeploy_llama2_70b()
    published = [tpot for _, _, tpot in calibration.LMDEPLOY_LLAMA2_70B.values()]
    assert [load.tpot.published for load in loads] == published
    band = {1: calibration.TOLERANCE, 16: calibration.TOLERANCE}
    off = [
        load.tpot
        for load in loads
        if abs(load.tpot.error) > band.get(load.concurrency, calibration.LOADED_TOLERANCE)
    ]
    assert not off, off
    for length in (loads[:4], loads[4:]):  # 128 then 2,048 input tokens, by concurrency
        tpots = [load.tpot.simulated for load in length]
        assert tpots == sorted(tpots) and tpots[-1] > 1.1 * tpots[0]  # a bigger batch is slower
