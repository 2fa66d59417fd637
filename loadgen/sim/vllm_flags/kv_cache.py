"""The KV cache a preset's engine flags size, as vLLM sizes it, refuses it and logs it."""

from __future__ import annotations

import math

from loadgen.sim.model.presets import Preset

GIB = 2**30


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
