"""vLLM's engine flags on the simulator: vLLM's meaning, vLLM's refusals, vLLM's startup lines."""

from __future__ import annotations

import shlex

import pytest

from loadgen.sim.cli import build_parser, main
from loadgen.sim.model import presets
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.vllm_flags.kv_cache import startup_lines

SEED_LINE = (
    "--tensor-parallel-size 4 --max-num-batched-tokens 8192 --max-model-len 2048 "
    "--quantization awq --dtype float16 --gpu-memory-utilization 0.85"
)


def applied(preset: str, line: str) -> tuple[presets.Preset, list[str]]:
    args = build_parser().parse_args(["--preset", preset, *shlex.split(line)])
    return apply_flags(presets.load(preset), args)


def test_the_seeds_vllm_serve_line_overrides_the_preset() -> None:
    preset, warnings = applied("llama-70b-awq-tp4-a100", SEED_LINE)
    assert preset.engine.max_num_batched_tokens == 8192
    assert preset.engine.gpu_memory_utilization == 0.85
    assert preset.max_model_len == 2048
    assert preset.engine.enable_prefix_caching and preset.engine.enable_chunked_prefill
    assert "forcing awq" in warnings[0]  # vLLM's own warning for awq over awq_marlin
    base = presets.load("llama-70b-awq-tp4-a100")
    assert preset.kv_capacity_tokens < base.kv_capacity_tokens  # 0.85 leaves less than 0.9


def test_no_flags_change_nothing() -> None:
    preset, warnings = applied("qwen-72b-bf16-tp4-a100", "")
    assert preset == presets.load("qwen-72b-bf16-tp4-a100") and warnings == []


def test_flags_change_what_they_mean() -> None:
    base = presets.load("llama-70b-bf16-tp4-a100")
    fp8, _ = applied(base.name, "--kv-cache-dtype fp8")
    assert fp8.kv_capacity_tokens == pytest.approx(2 * base.kv_capacity_tokens, abs=2)
    tp8, _ = applied(base.name, "-tp 8 --max-num-seqs 64 --block-size 32")
    assert tp8.perf.hardware.tensor_parallel == 8
    assert (tp8.engine.max_num_seqs, tp8.engine.block_size) == (64, 32)
    off, _ = applied(base.name, "--no-enable-prefix-caching --max-model-len 4k")
    assert not off.engine.enable_prefix_caching and off.max_model_len == 4000
    # without chunked prefill vLLM defaults the step budget to at least max_model_len
    whole, _ = applied(base.name, "--no-enable-chunked-prefill")
    assert whole.engine.max_num_batched_tokens == 8192 == whole.max_model_len


@pytest.mark.parametrize(
    ("preset", "line", "message"),
    [
        ("qwen-72b-bf16-tp4-a100", "--quantization awq", "does not quantize one"),
        ("llama-70b-awq-tp4-a100", "--quantization gptq", "is a AWQ checkpoint"),
        ("llama-70b-awq-tp4-a100", "-q awq --dtype bfloat16", "not supported for quantization"),
        ("qwen-72b-bf16-tp4-a100", "--dtype float32", "a preset's weights are 16-bit"),
        ("qwen-72b-bf16-tp4-a100", "-tp 3", "must be divisible by tensor parallel size (3)"),
        ("qwen-72b-bf16-tp4-a100", "--max-model-len 65536", "max_position_embeddings=32768"),
        ("llama-70b-bf16-tp4-a100", "-tp 1", "the weights do not fit"),
        (
            "llama-70b-bf16-tp4-a100",
            "--no-enable-chunked-prefill --max-num-batched-tokens 2048",
            "is smaller than max_model_len (8192)",
        ),
        ("llama-70b-bf16-tp4-a100", "--max-num-seqs 4096", "greater than or equal to"),
        (
            "llama-70b-bf16-tp4-a100",
            "--gpu-memory-utilization 0.415",
            "the estimated maximum model length is",
        ),
    ],
)
def test_what_vllm_refuses_is_refused_in_its_words(preset: str, line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        applied(preset, line)


def test_startup_prints_the_kv_cache_as_vllm_logs_it() -> None:
    preset, _ = applied("llama-70b-awq-tp4-a100", SEED_LINE)
    lines = startup_lines(preset)
    blocks = preset.kv_capacity_tokens // 16
    assert "Chunked prefill is enabled with max_num_batched_tokens=8192." in lines
    assert f"GPU KV cache size: {blocks * 16:,} tokens" in lines
    assert f"Maximum concurrency for 2,048 tokens per request: {blocks / 128:.2f}x" in lines
    assert any(line.startswith("Available KV cache memory: ") for line in lines)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "qwen-72b-bf16-tp4-a100", "--enforce-eager"], "cannot honour --enforce"),
        (["--preset", "qwen-72b-bf16-tp4-a100", "-q", "awq"], "does not quantize one"),
        (["--ttft", "1ms", "--itl", "1ms", "-tp", "4"], "fixed timing has no engine"),
        (["--ttft", "1ms", "--itl", "1ms", "--served-model-name", "a", "b"], "serves one name"),
        (["--preset", "llama-2-7b-bf16-h200", "--max-num-seqs", "-3"], "-3: must be at least 1"),
        (["--preset", "llama-2-7b-bf16-h200", "-tp", "0"], "0: must be at least 1"),
        (["--preset", "llama-2-7b-bf16-h200", "--max-num-batched-tokens", "2.5"], "whole"),
        (["--preset", "llama-2-7b-bf16-h200", "--max-model-len", "inf"], "not a context"),
        (["--preset", "llama-2-7b-bf16-h200", "--stream-interval", "0"], "must be at least 1"),
    ],
)
def test_the_command_line_refuses_with_exit_2(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


YARN = (
    '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, '
    '"original_max_position_embeddings": 32768}}'
)


def test_yarn_rope_scaling_raises_the_context_limit_as_vllm_derives_it() -> None:
    long, warnings = applied(
        "qwen-72b-bf16-tp4-a100", f"--max-model-len 65536 --hf-overrides '{YARN}'"
    )
    assert long.max_model_len == 65536 and warnings == []
    # YaRN: original_max_position_embeddings × factor = 131,072, and no further
    with pytest.raises(ValueError, match=r"max_position_embeddings=131072 in model"):
        applied("qwen-72b-bf16-tp4-a100", f"--max-model-len 200000 --hf-overrides '{YARN}'")
    # llama3-type scaling does not raise vLLM's derived limit
    llama3 = '{"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}'
    with pytest.raises(ValueError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"):
        applied("qwen-72b-bf16-tp4-a100", f"--max-model-len 65536 --hf-overrides '{llama3}'")


def test_allow_long_max_model_len_turns_vllms_refusal_into_its_warning() -> None:
    args = build_parser().parse_args(
        ["--preset", "qwen-72b-bf16-tp4-a100", "--max-model-len", "64K"]
    )
    base = presets.load("qwen-72b-bf16-tp4-a100")
    with pytest.raises(ValueError, match="To allow overriding this maximum"):
        apply_flags(base, args, env={})
    preset, warnings = apply_flags(base, args, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert preset.max_model_len == 65536
    assert any("must be used with extreme caution" in w for w in warnings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ('{"num_hidden_layers": 2}', "not a config.json key the simulator models"),
        ('{"rope_scaling": {"factor": 4.0}}', 'needs a "rope_type"'),
        ('{"rope_scaling": {"type": "yarn", "factor": 4.0}}', "needs original_max_position"),
    ],
)
def test_hf_overrides_it_cannot_honour_are_refused(overrides: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        applied("qwen-72b-bf16-tp4-a100", f"--hf-overrides '{overrides}'")


def test_hf_overrides_must_be_a_json_object(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--preset", "qwen-72b-bf16-tp4-a100", "--hf-overrides", "[1]"])
    assert "must be a JSON object" in capsys.readouterr().err
