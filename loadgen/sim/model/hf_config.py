"""A model's shape from its Hugging Face config.json (a local file; nothing is downloaded).

The parameters are counted from the shapes, as the checkpoint holds them: the token
embeddings and, unless tied to them, the output head; per layer the attention's projections
(grouped-query: K and V have kv_heads heads; Qwen2's Q, K and V carry biases), the MLP
(gated, three matrices, as every LLaMA-family model; two for the GPT-2 family), and the
norms. A mixture of experts (Mixtral's num_local_experts, Qwen-MoE's num_experts with
moe_intermediate_size and a shared expert) counts each routed expert and its router; the
model's active parameters per token follow from experts_per_token. The weight format is
`--dtype`'s (catalogue.DTYPES): bytes per parameter as the bundled presets count them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.sim.model.catalogue import DTYPES
from loadgen.sim.model.roofline import ModelSpec

UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "starcoder2", "phi", "gpt_bigcode"}
QKV_BIAS = {"qwen2", "qwen2_moe"}  # biases on Q, K and V without an attention_bias key
KV_CACHE_BYTES = 2  # a 16-bit KV cache; --kv-cache-dtype fp8 halves it


@dataclass(frozen=True, slots=True)
class Shape:
    name: str  # architectures[0], or model_type
    params: float
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    dtype: str = ""  # the checkpoint's weight format (catalogue.DTYPES), when it says
    experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0

    @property
    def active_params(self) -> float:
        return self.spec("bf16").active_params

    def spec(self, dtype: str, max_model_len: int | None = None) -> ModelSpec:
        """The model stored as `dtype`, serving up to max_model_len tokens (default: its own
        context limit, as vLLM defaults it)."""
        weights = DTYPES[dtype]
        return ModelSpec(
            params=self.params,
            bytes_per_param=weights.bytes_per_param,
            layers=self.layers,
            hidden_size=self.hidden_size,
            heads=self.heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            kv_cache_bytes=KV_CACHE_BYTES,
            max_model_len=max_model_len or self.max_position_embeddings,
            quantization=weights.quantization,
            max_position_embeddings=self.max_position_embeddings,
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            expert_params=self.expert_params,
        )


def read(path: str | Path, named_by: str = "--model-config") -> Shape:
    """The shape config.json at `path` describes; ValueError naming the file (after
    `named_by`, the flag or key that gave it) and the problem."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{named_by} {path}: cannot read it as JSON ({exc})") from None
    try:
        return shape(data)
    except ValueError as exc:
        raise ValueError(f"{named_by} {path}: {exc}") from None


def shape(config: Any) -> Shape:
    if not isinstance(config, dict):
        raise ValueError("not a model's config.json: not a JSON object")
    if "text_config" in config:
        raise ValueError("a multimodal model's config (text_config): not modelled")
    if "kv_lora_rank" in config:
        raise ValueError("multi-head latent attention (DeepSeek's kv_lora_rank): not modelled")
    hidden = _count(config, "hidden_size")
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    kv_heads = _count(config, "num_key_value_heads", heads)
    head_dim = _count(config, "head_dim", hidden // heads)
    vocab = _count(config, "vocab_size")
    context = _count(config, "max_position_embeddings")
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads")
    kind = str(config.get("model_type", ""))
    tied = config.get("tie_word_embeddings", False) is True
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if config.get("attention_bias") is True or kind in QKV_BIAS:
        attention += q + 2 * kv
    matrices = 2 if kind in UNGATED else 3
    experts, per_token, expert_params = _experts(config, hidden, layers, matrices)
    if experts:
        mlp = _shared_expert(config, hidden, matrices) + hidden * experts  # and the router
    else:
        mlp = matrices * hidden * _count(config, "intermediate_size")
    per_layer = attention + mlp + 2 * hidden
    params = layers * per_layer + expert_params + vocab * hidden * (1 if tied else 2) + hidden
    names = config.get("architectures") or [kind or "a model"]
    return Shape(
        name=str(names[0]),
        params=float(params),
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=context,
        tie_word_embeddings=tied,
        dtype=_stored_as(config),
        experts=experts,
        experts_per_token=per_token,
        expert_params=float(expert_params),
    )


def _stored_as(config: dict[str, Any]) -> str:
    """The weight format config.json names: its quantization method, else its torch_dtype."""
    method = config.get("quantization_config", {})
    if isinstance(method, dict) and method.get("quant_method") in DTYPES:
        return str(method["quant_method"])
    return {"bfloat16": "bf16", "float16": "fp16"}.get(str(config.get("torch_dtype")), "")


def _experts(
    config: dict[str, Any], hidden: int, layers: int, matrices: int
) -> tuple[int, int, int]:
    """Routed experts per layer, experts per token, and the routed experts' parameters."""
    key = "num_local_experts" if "num_local_experts" in config else "num_experts"
    if not config.get(key):
        return 0, 0, 0
    experts = _count(config, key)
    per_token = _count(config, "num_experts_per_tok")
    if per_token > experts:
        raise ValueError(f"num_experts_per_tok {per_token} is more than the {experts} experts")
    size = "moe_intermediate_size" if "moe_intermediate_size" in config else "intermediate_size"
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        raise ValueError("dense layers among the MoE ones (mlp_only_layers): not modelled")
    return experts, per_token, layers * experts * matrices * hidden * _count(config, size)


def _shared_expert(config: dict[str, Any], hidden: int, matrices: int) -> int:
    """Qwen-MoE's shared expert (every token goes through it) and its gate."""
    if "shared_expert_intermediate_size" not in config:
        return 0
    return matrices * hidden * _count(config, "shared_expert_intermediate_size") + hidden


def _count(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key)
    if value is None:  # absent, or null as some configs write an unset head_dim
        value = default
    if value is None:
        raise ValueError(f"not a model's config.json: no {key}")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
        raise ValueError(f"{key} = {json.dumps(value)}: not a positive whole number")
    return value
