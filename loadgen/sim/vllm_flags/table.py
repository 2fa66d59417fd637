"""vLLM's flags on the simulator's command line, or in one string (--virtual-args), with
vLLM's names, defaults and meaning; a flag the simulator cannot honour is refused (`refuse`),
never silently ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from collections.abc import Sequence
from typing import NoReturn

from loadgen.sim.model import catalogue, presets, speculation
from loadgen.sim.model.roofline import ModelSpec
from loadgen.sim.model.scheduler import BLOCK_SIZES

# mean reasoning length with a parser and no --reasoning-tokens
DEFAULT_REASONING_TOKENS = 256


DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


KV_CACHE_BYTES = {"auto": None, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


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
    _server_arguments(g)
    _engine_arguments(g)
    _serving_arguments(g)


def _server_arguments(g: argparse._ArgumentGroup) -> None:
    """Where it listens, the keys it asks for, the names it answers to."""
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


def _engine_arguments(g: argparse._ArgumentGroup) -> None:
    """The engine's: parallelism, batching, context, KV cache, weights, speculation."""
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


def _serving_arguments(g: argparse._ArgumentGroup) -> None:
    """What an answer says: reasoning, usage details, per-request metrics."""
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


def given(args: argparse.Namespace) -> list[str]:
    """The engine flags given on the command line, as flags."""
    return ["--" + f.replace("_", "-") for f in ENGINE_FLAGS if getattr(args, f) is not None]


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
