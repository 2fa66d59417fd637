"""The simulator's performance model against worked figures and the measured roofline."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.sim.model import presets
from loadgen.sim.model.roofline import (
    MBU_CEILING,
    MFU_CEILING,
    Efficiency,
    Hardware,
    ModelSpec,
    PerfModel,
)

A100 = Hardware(
    gpu="A100",
    tensor_parallel=1,
    hbm_bandwidth=2e12,
    peak_flops=312e12,
    gpu_memory=80 * 2**30,
    interconnect_bandwidth=300e9,
    allreduce_latency=10e-6,
    idle_watts=60,
    max_watts=400,
    compute_watts=500,
    memory_watts=400,
)
SEVEN_B = ModelSpec(
    params=7e9,
    bytes_per_param=2,
    layers=32,
    hidden_size=4096,
    heads=32,
    kv_heads=32,
    head_dim=128,
    kv_cache_bytes=2,
    max_model_len=4096,
)
# Llama 2 70B: the 7B's layout (fp16, 128-dim heads, 4k context) grown, with grouped KV heads
LLAMA2_70B = dataclasses.replace(
    SEVEN_B, params=69e9, layers=80, hidden_size=8192, heads=64, kv_heads=8
)


def seven_b(mbu: float = 0.5, mfu: float = 0.5) -> PerfModel:
    return PerfModel(SEVEN_B, A100, Efficiency(mbu=mbu, mfu=mfu))


def test_7b_fp16_at_half_mbu_on_2tbps_is_14ms_per_token() -> None:
    step = seven_b().step_time(tokens=1, kv_tokens=0)
    assert step.total == pytest.approx(0.014, rel=1e-9)
    assert not step.compute_bound


def test_kv_cache_of_llama2_70b_gqa_at_1024_tokens() -> None:
    # 2 (K, V) × 80 layers × 8 KV heads × 128 dims × 2 bytes = 327,680 B/token; ×1024 = 320 MiB
    assert LLAMA2_70B.kv_bytes_per_token == 327_680
    assert LLAMA2_70B.kv_bytes_per_token * 1024 == 320 * 2**20


def test_kv_cache_is_split_across_tensor_parallel_gpus() -> None:
    tp4 = PerfModel(LLAMA2_70B, dataclasses.replace(A100, tensor_parallel=4), Efficiency(0.5, 0.5))
    assert tp4.kv_bytes_per_token_per_gpu == LLAMA2_70B.kv_bytes_per_token / 4
    tp16 = PerfModel(
        LLAMA2_70B, dataclasses.replace(A100, tensor_parallel=16), Efficiency(0.5, 0.5)
    )
    # 8 KV heads on 16 GPUs: each keeps one head, so half the cache is replicated
    assert tp16.kv_bytes_per_token_per_gpu == LLAMA2_70B.kv_bytes_per_token / 8


def test_kv_capacity_is_the_memory_left_after_weights() -> None:
    model = seven_b()
    free = 80 * 2**30 * 0.9 - 14e9
    assert model.kv_capacity_tokens(0.9) == int(free // SEVEN_B.kv_bytes_per_token)


def test_batching_is_sublinear_in_latency_and_near_linear_in_throughput() -> None:
    model = seven_b()
    context = 0  # weights only, as in the roofline measurement
    t1 = model.step_time(1, context).total
    previous = t1
    for batch in (2, 4, 8, 16, 32, 64):
        t = model.step_time(batch, context).total
        assert previous <= t < t1 * 1.15  # memory-bound: one weight pass serves the batch
        assert batch / t > 0.85 * batch / t1  # throughput scales with the batch
        previous = t
    big = model.step_time(1024, context)
    assert big.compute_bound
    assert 1024 / big.total < 1024 / t1  # once compute-bound, throughput stops scaling linearly
    assert model.step_time(2048, 0).total == pytest.approx(2 * big.total, rel=0.02)


def test_kv_reads_slow_decode_with_context() -> None:
    model = seven_b()
    short = model.step_time(32, 32 * 128).total
    long = model.step_time(32, 32 * 4096).total
    assert long > 2 * short  # 32 × 4k tokens × 512 KiB is 64 GiB of KV: it dominates


def test_prefill_is_compute_bound() -> None:
    step = seven_b(mfu=0.5).step_time(tokens=2048, kv_tokens=2048)
    assert step.compute_bound
    assert step.compute == pytest.approx(2 * 7e9 * 2048 / (312e12 * 0.5))


def test_tensor_parallel_adds_two_allreduces_per_layer() -> None:
    hw = dataclasses.replace(A100, tensor_parallel=4)
    model = PerfModel(LLAMA2_70B, hw, Efficiency(0.5, 0.5))
    one = model.communication_time(1)
    assert one == pytest.approx(2 * 80 * (10e-6 + 1.5 * 8192 * 2 / 300e9))
    assert model.communication_time(1024) > 5 * one  # bandwidth term grows with tokens
    assert PerfModel(SEVEN_B, A100, Efficiency(0.5, 0.5)).communication_time(64) == 0
    step = model.step_time(1, 0)
    assert step.total == pytest.approx(max(step.memory, step.compute) + one)


def test_the_cpu_share_of_a_step_grows_with_its_sequences() -> None:
    efficiency = Efficiency(0.5, 0.5, host_overhead=1e-3, sequence_overhead=20e-6)
    model = PerfModel(SEVEN_B, A100, efficiency)
    one, many = (
        model.step_time(64, 64 * 512, sequences=1),
        model.step_time(64, 64 * 512, sequences=64),
    )
    assert one.overhead == pytest.approx(1e-3 + 20e-6)
    assert many.total - one.total == pytest.approx(63 * 20e-6)


def test_the_pcie_preset_pays_for_its_all_reduces_as_tokens_grow() -> None:
    nvlink, pcie = (
        presets.load("llama-70b-bf16-tp4-a100"),
        presets.load("llama-70b-bf16-tp4-a100-pcie"),
    )
    for tokens in (1, 256, 2048):
        assert pcie.perf.communication_time(tokens) > 4 * nvlink.perf.communication_time(tokens)
    # a 2,048-token prefill chunk takes more than twice as long: 160 all-reduces of 32 MiB
    assert pcie.perf.step_time(2048, 2048).total > 2 * nvlink.perf.step_time(2048, 2048).total


@pytest.mark.parametrize("field,value", [("mbu", MBU_CEILING), ("mfu", MFU_CEILING), ("mbu", 0.0)])
def test_efficiency_beyond_the_measured_roofline_is_refused(field: str, value: float) -> None:
    efficiency = dataclasses.replace(Efficiency(0.5, 0.5), **{field: value})
    with pytest.raises(ValueError, match=field):
        PerfModel(SEVEN_B, A100, efficiency)


def test_weights_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="fit"):
        PerfModel(LLAMA2_70B, A100, Efficiency(0.5, 0.5))  # 138 GB on one 80 GiB GPU


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_loads_and_stays_under_the_roofline(name: str) -> None:
    preset = presets.load(name)
    eff = preset.perf.efficiency
    assert 0 < eff.mbu < MBU_CEILING and 0 < eff.mfu < MFU_CEILING
    assert preset.kv_capacity_tokens >= preset.max_model_len
    decode = preset.perf.step_time(1, 1024).total
    assert 0.004 < decode < 0.05  # a plausible single-stream TPOT for these setups


def test_required_presets_and_their_served_names() -> None:
    assert presets.load("llama-70b-awq-tp4-a100").served_model_name == "llama-70b"
    assert presets.load("qwen-72b-gptq-tp4-a100").served_model_name == "qwen-72b"
    assert {
        "llama-2-70b-fp16-tp4-a100",
        "llama-2-70b-fp16-tp8-a100",
        "llama-2-70b-fp16-tp4-h100",
        "mpt-7b-fp16-a100",
        "llama-2-7b-bf16-h200",
    } <= set(presets.names())


def test_llama2_7b_h200_preset_is_slower_than_the_bare_roofline() -> None:
    # docs/sim/h200-roofline.json: 3.63 ms per step at 1 token, 42 ms at 2,048 (no attention)
    perf = presets.load("llama-2-7b-bf16-h200").perf
    assert perf.step_time(1, 0).total > 3.63e-3
    assert perf.step_time(2048, 0).total > 42e-3


def test_qwen_mha_needs_eight_times_the_kv_of_llama_gqa() -> None:
    qwen = presets.load("qwen-72b-gptq-tp4-a100").perf
    llama = presets.load("llama-70b-awq-tp4-a100").perf
    assert qwen.kv_bytes_per_token_per_gpu == 8 * llama.kv_bytes_per_token_per_gpu


def test_preset_file_errors_name_the_problem(tmp_path) -> None:
    text = (presets._directory() / "mpt-7b-fp16-a100.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("mbu = 0.60", "mbu = 0.9"))
    with pytest.raises(ValueError, match="mbu"):
        presets.load_file(bad)
    bad.write_text(text.replace("layers = 32", "layer = 32"))
    with pytest.raises(ValueError, match=r"\[model\] layer: unknown key"):
        presets.load_file(bad)
    bad.write_text(text.replace('host_overhead = "1ms"', 'host_overhead = "3ms"'))
    assert presets.load_file(bad).perf.efficiency.host_overhead == pytest.approx(0.003)
    with pytest.raises(ValueError, match="unknown preset"):
        presets.load("no-such-preset")


def test_power_follows_the_steps_utilisation_not_whether_one_runs() -> None:
    """The founding measurement: ~300 W per A100 under load, where the old model drew the
    board's 400 W whenever a step ran."""
    perf = presets.load("llama-70b-awq-tp4-a100").perf
    hw = perf.hardware

    def decode(streams: int) -> float:
        return perf.power(perf.step_time(streams, streams * 600, streams * 600, streams))

    assert hw.idle_watts < decode(1) < decode(8) < 0.65 * hw.max_watts
    assert decode(32) == pytest.approx(300, rel=0.05)
    prefill = perf.power(perf.step_time(2048, 2048, 2048 * 1024, 4))
    assert decode(8) < prefill < hw.max_watts
    busy = dataclasses.replace(hw, compute_watts=10 * hw.max_watts)  # capped at the limit
    capped = dataclasses.replace(perf, hardware=busy)
    assert capped.power(perf.step_time(2048, 2048)) == hw.max_watts
