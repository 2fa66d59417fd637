"""vLLM's engine flags applied to a preset: checked as vLLM checks them, with vLLM's words
where vLLM refuses, and what vLLM would warn about; or, with --gpu and --model-config, the
preset a catalogue GPU and a config.json make.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from collections.abc import Mapping

from loadgen.sim.model import catalogue, derived, hf_config
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import ModelSpec
from loadgen.sim.model.scheduler import EngineConfig
from loadgen.sim.vllm_flags.kv_cache import check_kv_cache
from loadgen.sim.vllm_flags.table import ENGINE_FLAGS, KV_CACHE_BYTES, parse_text

SIXTEEN_BIT = {"auto", "half", "float16", "bfloat16"}


# vLLM's names of the 16-bit formats, as the catalogue names them
CATALOGUE_DTYPE = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16"}


# the kernels vLLM may load a checkpoint with, by the checkpoint's method
QUANTIZATIONS = {"awq": ("awq", "awq_marlin"), "gptq": ("gptq", "gptq_marlin", "marlin")}


# RoPE types whose factor vLLM does not apply to the derived length (config/model.py)
UNSCALED_ROPE = ("su", "longrope", "llama3")


def from_catalogue(args: argparse.Namespace) -> Preset | None:
    """The preset --gpu and --model-config describe (--dtype, else config.json's format;
    --tensor-parallel-size GPUs), or None when neither is given. ValueError for one alone,
    an unknown GPU, a file that is not a model's config.json or a dtype the GPU lacks."""
    if args.gpu is None and args.model_config is None:
        return None
    if args.gpu is None or args.model_config is None:
        raise ValueError("--gpu and --model-config go together")
    gpu = catalogue.gpu(args.gpu)
    shape = hf_config.read(args.model_config)
    dtype = CATALOGUE_DTYPE.get(args.dtype or "auto", args.dtype or "auto")
    if dtype == "auto":
        dtype = shape.dtype or "bf16"
    if dtype not in catalogue.DTYPES:
        raise ValueError(f"--dtype {args.dtype}: the catalogue runs {', '.join(catalogue.DTYPES)}")
    gpu.peak_flops(dtype)  # the one-line refusal of a dtype this GPU has no rate for
    return derived.preset(gpu, shape, dtype, args.tensor_parallel_size or 1, args.model_config)


def what_if(preset: Preset, text: str) -> str:
    """The flags of `text` (--virtual-args, checked) that change `preset`: the what-if a
    prediction from it makes. A flag that repeats what the preset already says (a fitted
    preset's own --max-num-seqs, say) is none; nor is a flag outside the engine."""
    given = parse_text(text)
    applied, _warnings = apply_flags(preset, given)
    changing = []
    for flag in ENGINE_FLAGS:
        if getattr(given, flag) is None:
            continue
        try:
            without, _warnings = apply_flags(
                preset, argparse.Namespace(**vars(given) | {flag: None})
            )
        except ValueError:  # the others alone are refused: this one changes what holds
            without = None
        if without != applied:
            changing.append(flag)
    kept = [group for group in _groups(shlex.split(text)) if _flag(group) in changing]
    return shlex.join(token for group in kept for token in group)


def _groups(tokens: list[str]) -> list[list[str]]:
    """The tokens by flag: each option with the values after it."""
    groups: list[list[str]] = []
    for token in tokens:
        if (token.startswith("-") and not _is_number(token)) or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def _flag(group: list[str]) -> str | None:
    """The engine flag one option's tokens set, as argparse reads them (aliases, -tp,
    --flag=value, abbreviations); None for another flag."""
    alone = parse_text(shlex.join(group))
    return next((f for f in ENGINE_FLAGS if getattr(alone, f) is not None), None)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def apply_flags(
    preset: Preset, args: argparse.Namespace, env: Mapping[str, str] = os.environ
) -> tuple[Preset, list[str]]:
    """The preset with the given engine flags applied, checked as vLLM checks them, and
    what vLLM would warn about. Raises ValueError for what vLLM (or the simulator) refuses.
    `env` is read for VLLM_ALLOW_LONG_MAX_MODEL_LEN, as vLLM reads its environment."""
    warnings: list[str] = [preset.warning] if preset.warning else []
    warnings += _checkpoint(preset, args)
    model, context_warnings = _context(preset.perf.model, args, env)
    warnings += context_warnings
    tp = args.tensor_parallel_size or preset.perf.hardware.tensor_parallel
    if model.heads % tp:
        raise ValueError(
            f"Total number of attention heads ({model.heads}) must be divisible by tensor "
            f"parallel size ({tp})."
        )
    hardware = dataclasses.replace(preset.perf.hardware, tensor_parallel=tp)
    engine = _engine(preset.engine, args, model.max_model_len)
    perf = dataclasses.replace(preset.perf, model=model, hardware=hardware)
    out = dataclasses.replace(preset, perf=perf, engine=engine)
    check_kv_cache(out)
    return out, warnings


def _checkpoint(preset: Preset, args: argparse.Namespace) -> list[str]:
    """--quantization and --dtype against the checkpoint the preset is: vLLM's refusals,
    and its warning for a method that has a faster kernel."""
    method = preset.perf.model.quantization
    warnings = []
    if args.quantization is not None:
        if args.quantization not in QUANTIZATIONS.get(method, ()):
            checkpoint = f"a {method.upper()} checkpoint" if method else "a 16-bit checkpoint"
            raise ValueError(
                f"--quantization {args.quantization}: preset {preset.name} is {checkpoint}; "
                "vLLM's --quantization names how a checkpoint was quantized, it does not "
                "quantize one (pick a preset of that method, e.g. llama-70b-awq-tp4-a100)"
            )
        if args.quantization == method:
            warnings.append(
                f"Detected that the model can run with {method}_marlin, however you specified "
                f"quantization={method} explicitly, so forcing {method}. Use "
                f"quantization={method}_marlin for faster inference (the simulator times "
                "both with the preset's efficiencies)"
            )
    if args.dtype is not None:
        own = preset.weights and CATALOGUE_DTYPE.get(args.dtype, args.dtype) == preset.weights
        if args.dtype not in SIXTEEN_BIT | {"bf16", "fp16"} and not own:
            raise ValueError(
                f"--dtype {args.dtype}: a preset's weights are 16-bit or its checkpoint's "
                "method; give --gpu and --model-config to run a model in another format"
            )
        if method == "awq" and args.dtype == "bfloat16" and args.quantization == "awq":
            raise ValueError(
                "torch.bfloat16 is not supported for quantization method awq. "
                "Supported dtypes: [torch.float16]"
            )
    return warnings


def _context(
    model: ModelSpec, args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[ModelSpec, list[str]]:
    """The model with --kv-cache-dtype and --max-model-len applied: a length past what
    config.json (and --hf-overrides) allow is refused, or, as vLLM lets the environment
    say, a warning."""
    if args.kv_cache_dtype is not None:
        kv_bytes = KV_CACHE_BYTES[args.kv_cache_dtype]
        model = dataclasses.replace(model, kv_cache_bytes=kv_bytes or model.kv_cache_bytes)
    warnings = []
    limit = derived_max_model_len(model.max_position_embeddings, args.hf_overrides or {})
    if args.max_model_len and limit and args.max_model_len > limit:
        message = (
            f"User-specified max_model_len ({args.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={limit:g} in model's config.json)."
        )
        if env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("1", "true", "True"):
            raise ValueError(
                f"{message} To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
            )
        warnings.append(
            f"{message} VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
        )
    max_model_len = args.max_model_len or model.max_model_len
    return dataclasses.replace(model, max_model_len=max_model_len), warnings


def _engine(engine: EngineConfig, args: argparse.Namespace, max_model_len: int) -> EngineConfig:
    """The scheduler's flags with vLLM's defaults where none is given, and its refusals."""
    chunked = engine.enable_chunked_prefill
    if args.enable_chunked_prefill is not None:
        chunked = args.enable_chunked_prefill
    batched = args.max_num_batched_tokens or engine.max_num_batched_tokens
    if args.max_num_batched_tokens is None and not chunked:
        batched = max(max_model_len, batched)  # vLLM's default without chunked prefill
    seqs = args.max_num_seqs or engine.max_num_seqs
    if args.max_num_seqs is None:
        seqs = min(seqs, batched)
    if batched < max_model_len and not chunked:
        raise ValueError(
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if batched < seqs:
        raise ValueError(
            f"max_num_batched_tokens ({batched}) must be greater than or equal to "
            f"max_num_seqs ({seqs})."
        )
    utilization = args.gpu_memory_utilization or engine.gpu_memory_utilization
    if not 0 < utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization {utilization}: must be in (0, 1]")
    caching = engine.enable_prefix_caching
    if args.enable_prefix_caching is not None:
        caching = args.enable_prefix_caching
    return dataclasses.replace(
        engine,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        gpu_memory_utilization=utilization,
        block_size=args.block_size or engine.block_size,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=caching,
        speculation=args.speculative_config or engine.speculation,
    )


def derived_max_model_len(max_position_embeddings: int, overrides: Mapping[str, object]) -> float:
    """The context limit vLLM derives from config.json with `overrides` merged in: RoPE
    scaling multiplies it by its factor (YaRN: original_max_position_embeddings × factor),
    but for the types in UNSCALED_ROPE. 0: unknown (no limit checked)."""
    unknown = set(overrides) - {"rope_scaling"}
    if unknown:
        raise ValueError(
            f"--hf-overrides {', '.join(sorted(unknown))}: not a config.json key the simulator "
            "models (refused rather than ignored); it honours rope_scaling"
        )
    rope = overrides.get("rope_scaling")
    if rope is None or not max_position_embeddings:
        return max_position_embeddings
    if not isinstance(rope, dict) or not isinstance(rope.get("rope_type", rope.get("type")), str):
        raise ValueError('--hf-overrides rope_scaling: needs a "rope_type" (or "type")')
    kind = rope.get("rope_type", rope.get("type"))
    if kind in UNSCALED_ROPE:
        return max_position_embeddings
    limit = float(max_position_embeddings)
    if kind == "yarn":
        if "original_max_position_embeddings" not in rope:
            raise ValueError(
                "--hf-overrides rope_scaling: yarn needs original_max_position_embeddings"
            )
        limit = float(rope["original_max_position_embeddings"])
    return limit * float(rope.get("factor", 1.0))
