"""vLLM's engine flags on the simulator's command line, with vLLM's names and meaning.

`python -m loadgen.sim --preset NAME` followed by the flags of a `vllm serve` line runs that
deployment's engine settings on the preset's model and hardware: each flag overrides what
the preset says, and is checked as vLLM checks it, with vLLM's words where vLLM refuses. A
flag the simulator cannot honour is refused (`refuse`), never silently ignored. The startup
lines (`startup_lines`) are the ones vLLM logs once its KV cache is sized.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import NoReturn

from loadgen.sim.model import catalogue, derived, hf_config, presets, speculation
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import ModelSpec
from loadgen.sim.model.scheduler import BLOCK_SIZES
from loadgen.sim.wire.serving import DEFAULT_REASONING_TOKENS, Serving

GIB = 2**30
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
SIXTEEN_BIT = {"auto", "half", "float16", "bfloat16"}
# vLLM's names of the 16-bit formats, as the catalogue names them
CATALOGUE_DTYPE = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16"}
KV_CACHE_BYTES = {"auto": None, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# the kernels vLLM may load a checkpoint with, by the checkpoint's method
QUANTIZATIONS = {"awq": ("awq", "awq_marlin"), "gptq": ("gptq", "gptq_marlin", "marlin")}
# RoPE types whose factor vLLM does not apply to the derived length (config/model.py)
UNSCALED_ROPE = ("su", "longrope", "llama3")
ENGINE_FLAGS = (
    "tensor_parallel_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "block_size",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "speculative_config",
    "hf_overrides",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's flags, as their own --help group. Engine flags default to None: the preset's."""
    g = parser.add_argument_group(
        "vLLM engine arguments",
        "vllm serve's own flags and meaning; with --preset they override the preset, and a "
        "vLLM flag the simulator cannot honour is refused (exit 2)",
    )
    g.add_argument("--host", default="127.0.0.1", help="address to listen on")
    g.add_argument("--port", type=int, default=8000, help="port to listen on")
    g.add_argument(
        "--api-key",
        nargs="+",
        metavar="KEY",
        help="require one of these keys as `Authorization: Bearer KEY` on /v1 paths "
        "(401 otherwise; default: $VLLM_API_KEY, else none)",
    )
    g.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        help="model name to answer to (default: the preset's, or 'sim' in fixed mode)",
    )
    g.add_argument(
        "--stream-interval",
        type=_count,
        default=1,
        metavar="K",
        help="tokens per streamed chunk after the first",
    )
    g.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=_count,
        metavar="N",
        help="GPUs in the TP group: weights, KV heads and all-reduces split over N "
        "(default: the preset's)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=_count,
        metavar="N",
        help="sequences per step (default: the preset's)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=_count,
        metavar="N",
        help="token budget per step (default: the preset's; without chunked prefill at "
        "least --max-model-len, as vLLM defaults it)",
    )
    g.add_argument(
        "--max-model-len",
        type=_length,
        metavar="N",
        help="context limit, read as vLLM reads it: 8k = 8,000, 8K = 8,192 (default: the preset's)",
    )
    g.add_argument(
        "--gpu-memory-utilization",
        type=float,
        metavar="F",
        help="share of each GPU's memory for weights and KV cache (default: the preset's)",
    )
    g.add_argument(
        "--block-size",
        type=int,
        choices=BLOCK_SIZES,
        help="KV-cache block in tokens (default: the preset's)",
    )
    g.add_argument(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        help="off: a prompt waits until all of its uncached tokens fit in one step "
        "(default: the preset's, on)",
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        help="vLLM V1's automatic prefix caching (default on)",
    )
    g.add_argument(
        "--kv-cache-dtype",
        choices=tuple(KV_CACHE_BYTES),
        help="auto: the model's dtype; fp8 halves the bytes per cached token",
    )
    add_model_arguments(g)
    g.add_argument(
        "--speculative-config",
        type=_speculation,
        metavar="JSON",
        help='speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 3, '
        "\"acceptance_rate\": 0.7}' (acceptance_rate: the simulator's own, default 0.7)",
    )
    g.add_argument(
        "--per-request-spec-decode-metrics",
        choices=("none", "summary"),
        default="none",
        help="summary: the speculative_decoding object in each request's metrics",
    )
    g.add_argument(
        "--reasoning-parser",
        metavar="NAME",
        help="a reasoning phase before each chat answer, streamed as delta.reasoning and "
        "counted in usage.completion_tokens_details.reasoning_tokens (any of vLLM's names)",
    )
    g.add_argument(
        "--reasoning-tokens",
        type=int,
        default=DEFAULT_REASONING_TOKENS,
        metavar="N",
        help="the simulator's own: mean reasoning length, each prompt's within ±50%% "
        f"(default {DEFAULT_REASONING_TOKENS})",
    )
    g.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="usage.prompt_tokens_details.cached_tokens from the prefix cache",
    )
    g.add_argument(
        "--enable-per-request-metrics",
        action="store_true",
        help="the per-request `metrics` object (queue, TTFT from scheduling, generation) "
        "on the final usage chunk and whole responses",
    )
    g.add_argument(
        "--quantization",
        "-q",
        metavar="METHOD",
        help="must match the preset's checkpoint (awq/awq_marlin, gptq/gptq_marlin/marlin)",
    )
    g.add_argument(
        "--hf-overrides",
        type=_json_object,
        metavar="JSON",
        help='config.json overrides; honoured: rope_scaling (e.g. {"rope_scaling": {"rope_type": '
        '"yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}), which raises the '
        "context limit as vLLM derives it; with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the "
        "environment a longer --max-model-len is a warning, not an error",
    )


def add_model_arguments(group: argparse._ActionsContainer) -> None:
    """--gpu, --model-config and --dtype: a model on a catalogue GPU instead of a preset."""
    group.add_argument(
        "--dtype",
        choices=(*DTYPES, *catalogue.DTYPES),
        help="16-bit only with a preset; with --gpu the weight format too: "
        f"{', '.join(catalogue.DTYPES)} (default: config.json's)",
    )
    group.add_argument(
        "--gpu",
        metavar="ID",
        help="the simulator's own: a GPU of the catalogue (a100-sxm-80gb, rtx-4090, ...), "
        "with --model-config instead of a preset",
    )
    group.add_argument(
        "--model-config",
        metavar="FILE",
        help="the simulator's own: the model's Hugging Face config.json, with --gpu",
    )


def api_keys(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    """The keys /v1 paths require, as vLLM takes them: --api-key, else $VLLM_API_KEY."""
    return [key for key in (args.api_key or [environ.get("VLLM_API_KEY", "")]) if key]


def serving(args: argparse.Namespace) -> Serving:
    """The serving flags (serving.py); ValueError for a parser vLLM does not have."""
    return Serving(
        reasoning_parser=args.reasoning_parser,
        reasoning_tokens=args.reasoning_tokens,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        per_request_metrics=args.enable_per_request_metrics,
        spec_metrics=args.per_request_spec_decode_metrics == "summary",
    )


class _TextParser(argparse.ArgumentParser):
    """vLLM's flags from one string: a bad one is a ValueError (one line), not an exit."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def parse_text(text: str) -> argparse.Namespace:
    """vLLM's flags written as one string (`--virtual-args "--max-num-seqs 128"`), parsed as
    the simulator's command line parses them; ValueError, starting "--virtual-args:", for one
    that does not parse or that the simulator does not model."""
    parser = _TextParser(prog="--virtual-args", add_help=False)
    add_arguments(parser)
    try:
        args, unknown = parser.parse_known_args(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"--virtual-args: {exc}") from None
    if unknown:
        raise ValueError(f"--virtual-args: {refuse(unknown)}")
    return args


def refuse(unknown: Sequence[str]) -> str:
    """The message for flags the parser did not know: vLLM's, presumably, not modelled."""
    known = ", ".join("--" + f.replace("_", "-") for f in ENGINE_FLAGS)
    return (
        f"cannot honour {' '.join(unknown)}: not a flag the simulator models (refused rather "
        f"than ignored). The vLLM flags it honours: --host, --port, --served-model-name, "
        f"--stream-interval, --reasoning-parser, --enable-prompt-tokens-details, "
        f"--enable-per-request-metrics, {known}"
    )


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


def given(args: argparse.Namespace) -> list[str]:
    """The engine flags given on the command line, as flags."""
    return ["--" + f.replace("_", "-") for f in ENGINE_FLAGS if getattr(args, f) is not None]


def what_if(preset: Preset, text: str) -> str:
    """The flags of `text` (--virtual-args, checked) that change `preset`: the what-if a
    prediction from it makes. A flag that repeats what the preset already says (a fitted
    preset's own --max-num-seqs, say) is none; nor is a flag outside the engine."""
    given = parse_text(text)
    applied, _warnings = apply(preset, given)
    changing = []
    for flag in ENGINE_FLAGS:
        if getattr(given, flag) is None:
            continue
        try:
            without, _warnings = apply(preset, argparse.Namespace(**vars(given) | {flag: None}))
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


def apply(
    preset: Preset, args: argparse.Namespace, env: Mapping[str, str] = os.environ
) -> tuple[Preset, list[str]]:
    """The preset with the given engine flags applied, checked as vLLM checks them, and
    what vLLM would warn about. Raises ValueError for what vLLM (or the simulator) refuses.
    `env` is read for VLLM_ALLOW_LONG_MAX_MODEL_LEN, as vLLM reads its environment."""
    warnings: list[str] = [preset.warning] if preset.warning else []
    model, hardware = preset.perf.model, preset.perf.hardware
    engine = preset.engine

    method = model.quantization
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
    if args.kv_cache_dtype is not None:
        kv_bytes = KV_CACHE_BYTES[args.kv_cache_dtype]
        model = dataclasses.replace(model, kv_cache_bytes=kv_bytes or model.kv_cache_bytes)

    max_model_len = args.max_model_len or model.max_model_len
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
    model = dataclasses.replace(model, max_model_len=max_model_len)

    tp = args.tensor_parallel_size or hardware.tensor_parallel
    if model.heads % tp:
        raise ValueError(
            f"Total number of attention heads ({model.heads}) must be divisible by tensor "
            f"parallel size ({tp})."
        )
    hardware = dataclasses.replace(hardware, tensor_parallel=tp)

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
    engine = dataclasses.replace(
        engine,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        gpu_memory_utilization=utilization,
        block_size=args.block_size or engine.block_size,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=caching,
        speculation=args.speculative_config or engine.speculation,
    )
    perf = dataclasses.replace(preset.perf, model=model, hardware=hardware)
    out = dataclasses.replace(preset, perf=perf, engine=engine)
    check_kv_cache(out)
    return out, warnings


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


def kv_cache_memory(preset: Preset) -> float:
    """Bytes per GPU left for the KV cache (vLLM: 'Available KV cache memory')."""
    perf = preset.perf
    budget = perf.hardware.gpu_memory * preset.engine.gpu_memory_utilization
    draft = preset.draft
    drafts = draft.weight_bytes / perf.hardware.tensor_parallel if draft is not None else 0.0
    return budget - perf.weight_bytes_per_gpu - drafts


def kv_cache_blocks(preset: Preset) -> int:
    """vLLM's num_gpu_blocks."""
    return preset.kv_capacity_tokens // preset.engine.block_size


def check_kv_cache(preset: Preset) -> None:
    """vLLM's refusal when one request of max_model_len does not fit in the KV cache."""
    available = kv_cache_memory(preset)
    if available <= 0:
        raise ValueError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    per_token = preset.kv_bytes_per_token_per_gpu
    size = preset.engine.block_size
    needed = math.ceil(preset.max_model_len / size) * size * per_token
    if needed > available:
        estimate = int(available // per_token) // size * size
        raise ValueError(
            f"To serve at least one request with the models's max seq len "
            f"({preset.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({available / GIB:.2f} GiB). Based on "
            f"the available memory, the estimated maximum model length is {estimate}. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )


def startup_lines(preset: Preset) -> list[str]:
    """What vLLM logs once it has sized the KV cache, in its words (gpu_worker.py,
    kv_cache_utils.py, config/scheduler.py), plus the block count it exports."""
    engine = preset.engine
    blocks = kv_cache_blocks(preset)
    per_request = math.ceil(preset.max_model_len / engine.block_size)
    lines = []
    if engine.enable_chunked_prefill:
        lines.append(
            "Chunked prefill is enabled with "
            f"max_num_batched_tokens={engine.max_num_batched_tokens}."
        )
    lines += [
        f"Available KV cache memory: {kv_cache_memory(preset) / GIB:.2f} GiB",
        f"GPU KV cache size: {blocks * engine.block_size:,} tokens",
        f"Maximum concurrency for {preset.max_model_len:,} tokens per request: "
        f"{blocks / per_request:.2f}x",
        f"KV cache blocks: {blocks:,} of {engine.block_size} tokens (num_gpu_blocks); "
        f"prefix caching {'on' if engine.enable_prefix_caching else 'off'}",
    ]
    return lines


def _speculation(text: str) -> speculation.Speculation:
    try:
        spec = speculation.parse(text)
        if spec.method == "draft_model":
            spec = dataclasses.replace(spec, draft=_draft_shape(spec.model))
        return spec
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _draft_shape(model: str) -> ModelSpec:
    """A draft model's shape: the [model] table of the preset `model` names."""
    if not model:
        raise ValueError('--speculative-config: draft_model needs "model" (a preset name)')
    try:
        found = presets.load_file(model) if model.endswith(".toml") else presets.load(model)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f'--speculative-config: draft "model" {model!r}: the simulator takes the draft\'s '
            f"shape from a bundled preset or a preset file ({exc})"
        ) from None
    return found.perf.model


def _json_object(text: str) -> dict[str, object]:
    """--hf-overrides' value: a JSON object, as vLLM parses it."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _count(text: str) -> int:
    """GPUs, sequences, tokens: a whole number of at least one (0 would read as "unset")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def _length(text: str) -> int:
    """vLLM's human-readable lengths: 8192, 8k, 32K, 1m."""
    scale = {"k": 1000, "K": 1024, "m": 1_000_000, "M": 2**20}.get(text[-1:], 1)
    try:
        length = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a length: {text!r}") from None
    if not 1 <= length < 2**40:  # also NaN and infinity
        raise argparse.ArgumentTypeError(f"{text}: not a context length")
    return int(length)
