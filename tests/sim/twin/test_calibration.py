"""The simulator's presets against published measurements, replayed on a virtual clock."""

from __future__ import annotations

import dataclasses

from loadgen.sim.model import presets
from loadgen.sim.model.sequence import Seq
from loadgen.sim.twin import calibration


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


def test_llama_70b_over_pcie_follows_vllms_serving_benchmark_at_every_rate() -> None:
    rates = calibration.vllm_pcie_llama33_70b()
    assert [r.qps for r in rates] == list(calibration.VLLM_PCIE_LLAMA33_70B)
    off = [r.ttft for r in rates if abs(r.ttft.error) > calibration.TTFT_TOLERANCE]
    off += [r.tpot for r in rates if abs(r.tpot.error) > calibration.TOLERANCE]
    assert not off, off
    assert rates[1].tpot.simulated > 1.4 * rates[0].tpot.simulated  # 4 QPS loads the GPUs


def test_the_same_gpus_on_nvlink_would_fail_the_pcie_check() -> None:
    """The all-reduce over PCIe is what the published TTFT and TPOT need: the NVLink preset
    (vLLM's custom all-reduce, 300 GB/s links) is half as slow on the same load."""
    nvlink = presets.load("llama-70b-bf16-tp4-a100")
    for rate in calibration.vllm_pcie_llama33_70b(nvlink):
        assert rate.ttft.error < -calibration.TTFT_TOLERANCE
        assert rate.tpot.error < -calibration.TOLERANCE


def test_llama_2_70b_under_load_follows_lmdeploys_benchmark_within_its_bands() -> None:
    loads = calibration.lmdeploy_llama2_70b()
    published = [tpot for _, _, tpot in calibration.LMDEPLOY_LLAMA2_70B.values()]
    assert [load.tpot.published for load in loads] == published
    off = [load.tpot for load in loads if abs(load.tpot.error) > calibration.TOLERANCE]
    low, high = calibration.LMDEPLOY_TTFT_BAND
    off += [load.ttft for load in loads if not low <= load.ttft.error <= high]
    assert not off, off
    for length in (loads[:4], loads[4:]):  # 128 then 2,048 input tokens, by concurrency
        tpots = [load.tpot.simulated for load in length]
        assert tpots == sorted(tpots) and tpots[-1] > 1.1 * tpots[0]  # a bigger batch is slower


def test_without_turbominds_per_sequence_cost_tpot_at_64_clients_leaves_the_band() -> None:
    preset = presets.load("llama-2-70b-fp16-tp4-a100")
    vllms = preset.perf.efficiency.sequence_overhead
    [load] = calibration.lmdeploy_llama2_70b(rows=[(64, 2048, 2048)], sequence_overhead=vllms)
    assert load.tpot.error < -calibration.TOLERANCE


def test_a_front_end_counts_in_the_ttft_a_client_sees() -> None:
    """A burst waits in a serial front end before the engine sees it: the replay's TTFT
    counts from the sending, not from the hand-off to the engine."""
    preset = calibration.with_frontend(presets.load("llama-70b-bf16-tp4-a100"), 0.05, 0.0)
    burst = [Seq(100, 4, 0.0) for _ in range(4)]
    trace = calibration.replay(preset, burst)
    ttfts = sorted(t for s in trace.finished if (t := trace.ttft(s)) is not None)
    assert len(ttfts) == 4 and ttfts[0] > 0.05 and ttfts[-1] > 0.2
    bare = calibration.replay(presets.load("llama-70b-bf16-tp4-a100"), [Seq(100, 4, 0.0)])
    assert bare.ttft(bare.finished[0]) < 0.05
