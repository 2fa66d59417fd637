"""The simulator's performance model: how long one engine step takes. Pure, no I/O.

A transformer step streams every weight once and reads the KV cache of every sequence in the
batch (memory time), and does 2 FLOPs per parameter per token plus its attention's 4 FLOPs
per (query, key) pair per layer and hidden unit (compute time); the GPU is busy for
whichever is larger. Attention is what makes a long prompt's prefill superlinear. Tensor
parallelism splits both across TP GPUs and adds two all-reduces per layer, each a fixed
latency plus the step's activations over the link (so the term grows with tokens per step:
small on NVLink, large over PCIe). Achievable fractions of the datasheet (MBU, MFU) stand in
for everything a real engine does besides the matmuls; the CPU's share of a step is a fixed
cost plus a cost per sequence in the batch (scheduling, input preparation, sampling and
output processing are per request and run between the GPU's forward passes).

Power follows what a step does, not whether one runs: a GPU draws its idle power plus a
share of `compute_watts` for the fraction of datasheet FLOP/s the step achieves and a share
of `memory_watts` for the fraction of datasheet bandwidth, capped at its power limit. A
memory-bound decode step at small batch therefore draws well under the limit; a long prefill
reaches it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Upper bounds for a preset's efficiencies, in datasheet terms. Measured on one H200
# (docs/sim/h200-roofline.json): bare weight streaming reached 0.77 of the datasheet
# bandwidth and bare bf16 matmuls 0.68 of the datasheet FLOP/s. A serving engine adds
# attention, sampling and scheduling on top, so a preset must stay below both. They are a
# Hardware's defaults: the catalogue (catalogue.py) sets each GPU's own.
MBU_CEILING = 0.77
MFU_CEILING = 0.68


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The model's shape and storage. Sizes in bytes, counts in units."""

    params: float
    bytes_per_param: float  # 2 fp16/bf16, 1 int8, ~0.56 int4 AWQ/GPTQ with scales
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_cache_bytes: float  # bytes per KV element (2 for an fp16 cache)
    max_model_len: int
    quantization: str = ""  # the checkpoint's method (vLLM's --quantization): awq, gptq or none
    max_position_embeddings: int = 0  # the model's own context limit (config.json); 0: unknown
    # a mixture of experts: routed experts per layer, how many each token is sent to, and
    # their parameters over all layers (counted in `params` too); 0: a dense model
    experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def active_params(self) -> float:
        """Parameters one token is multiplied by: of the routed experts, its own only."""
        if not self.experts:
            return self.params
        return self.params - self.expert_params * (1 - self.experts_per_token / self.experts)

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes a forward pass over `tokens` tokens reads: every dense weight, and of
        the routed experts those some token goes to. With routing spread evenly, a share
        1 − (1 − k/E)^tokens of them: one token reads its k, a large batch all E."""
        if not self.experts:
            return self.weight_bytes
        untouched = (1 - self.experts_per_token / self.experts) ** tokens
        return (self.params - self.expert_params * untouched) * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """2 (K and V) × layers × kv_heads × head_dim × bytes, over all GPUs."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_cache_bytes


@dataclass(frozen=True, slots=True)
class Hardware:
    """One tensor-parallel group of identical GPUs. Rates per GPU, in bytes/s and FLOP/s."""

    gpu: str
    tensor_parallel: int
    hbm_bandwidth: float
    peak_flops: float
    gpu_memory: float
    interconnect_bandwidth: float  # per GPU, one direction (NVLink)
    allreduce_latency: float  # seconds per all-reduce, independent of size
    idle_watts: float  # per GPU with nothing running
    max_watts: float  # per GPU: the board's power limit (TDP)
    compute_watts: float  # per GPU above idle, at 100% of peak_flops
    memory_watts: float  # per GPU above idle, at 100% of hbm_bandwidth
    mbu_ceiling: float = MBU_CEILING  # the most of hbm_bandwidth an engine can reach
    mfu_ceiling: float = MFU_CEILING  # the most of peak_flops an engine can reach


@dataclass(frozen=True, slots=True)
class Efficiency:
    mbu: float  # achieved / datasheet HBM bandwidth in memory-bound steps
    mfu: float  # achieved / datasheet FLOP/s in compute-bound steps
    host_overhead: float = 0.0  # seconds per step of CPU-side work the GPU waits for
    sequence_overhead: float = 0.0  # seconds per step per sequence in the batch, likewise
    # the API server's work before the engine sees a request (tokenising, templating), on
    # one serial process (frontend.py): seconds per request and per input token
    frontend_request: float = 0.0
    frontend_token: float = 0.0
    # and its work on what the engine sampled (detokenising, each stream's chunk), in the
    # same process: seconds per output token
    frontend_output_token: float = 0.0
    # the time each request spends outside the engine on its own, queueing for nothing (the
    # network, HTTP, the client): seconds per request
    frontend_latency: float = 0.0


@dataclass(frozen=True, slots=True)
class StepTime:
    memory: float
    compute: float
    communication: float
    overhead: float
    draft: float = 0.0  # a draft model's passes after the forward (speculative decoding)

    @property
    def total(self) -> float:
        return max(self.memory, self.compute) + self.communication + self.overhead + self.draft

    @property
    def compute_bound(self) -> bool:
        return self.compute > self.memory


@dataclass(frozen=True, slots=True)
class PerfModel:
    model: ModelSpec
    hardware: Hardware
    efficiency: Efficiency

    def __post_init__(self) -> None:
        e, hw = self.efficiency, self.hardware
        if not 0 < e.mbu < hw.mbu_ceiling:
            raise ValueError(f"mbu {e.mbu} outside (0, {hw.mbu_ceiling}): the GPU's MBU ceiling")
        if not 0 < e.mfu < hw.mfu_ceiling:
            raise ValueError(f"mfu {e.mfu} outside (0, {hw.mfu_ceiling}): the GPU's MFU ceiling")
        if self.kv_capacity_tokens(1.0) <= 0:
            raise ValueError("the weights do not fit in GPU memory")

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes / self.hardware.tensor_parallel

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return self.kv_per_gpu(self.model)

    def kv_per_gpu(self, m: ModelSpec) -> float:
        """KV heads are split across the TP group; with fewer KV heads than GPUs each
        GPU keeps a replica of one head."""
        heads_per_gpu = math.ceil(m.kv_heads / self.hardware.tensor_parallel)
        return 2 * m.layers * heads_per_gpu * m.head_dim * m.kv_cache_bytes

    def power(self, step: StepTime) -> float:
        """Watts per GPU while `step` runs: idle, plus compute and memory in proportion to the
        share of the datasheet rates they reach over the whole step, capped at max_watts."""
        hw, eff = self.hardware, self.efficiency
        if step.total <= 0:
            return hw.idle_watts
        compute_share = step.compute * eff.mfu / step.total
        memory_share = step.memory * eff.mbu / step.total
        dynamic = hw.compute_watts * compute_share + hw.memory_watts * memory_share
        return min(hw.max_watts, hw.idle_watts + dynamic)

    def kv_capacity_tokens(
        self, gpu_memory_utilization: float, draft: ModelSpec | None = None
    ) -> int:
        """Tokens of KV cache that fit in what is left of each GPU's budget after weights
        (a draft model's too: it is sharded alike and keeps its own KV for every token)."""
        free = self.hardware.gpu_memory * gpu_memory_utilization - self.weight_bytes_per_gpu
        per_token = self.kv_bytes_per_token_per_gpu
        if draft is not None:
            free -= draft.weight_bytes / self.hardware.tensor_parallel
            per_token += self.kv_per_gpu(draft)
        return int(free // per_token)

    def step_time(
        self, tokens: int, kv_tokens: int, attention: int = 0, sequences: int = 1
    ) -> StepTime:
        """One forward pass over `tokens` new tokens of `sequences` sequences that hold
        `kv_tokens` of context in the KV cache (read once each), scoring `attention`
        (query, key) pairs."""
        eff = self.efficiency
        memory, compute, communication = self._forward(self.model, tokens, kv_tokens, attention)
        overhead = eff.host_overhead + eff.sequence_overhead * sequences
        return StepTime(memory, compute, communication, overhead)

    def draft_time(self, draft: ModelSpec, passes: list[tuple[int, int, int]]) -> float:
        """A draft model's forward passes (tokens, kv_tokens, attention each) on these GPUs
        at the target's efficiencies, launched without CPU gaps (CUDA graphs)."""
        total = 0.0
        for tokens, kv_tokens, attention in passes:
            memory, compute, communication = self._forward(draft, tokens, kv_tokens, attention)
            total += max(memory, compute) + communication
        return total

    def _forward(
        self, m: ModelSpec, tokens: int, kv_tokens: int, attention: int
    ) -> tuple[float, float, float]:
        """Memory, compute and all-reduce time of one forward pass of model m."""
        hw, eff = self.hardware, self.efficiency
        tp = hw.tensor_parallel
        read = m.weight_bytes_read(tokens) / tp + self.kv_per_gpu(m) * kv_tokens
        memory = read / (hw.hbm_bandwidth * eff.mbu)
        flops = 2 * m.active_params * tokens + 4 * m.layers * m.heads * m.head_dim * attention
        compute = flops / (tp * hw.peak_flops * eff.mfu)
        return memory, compute, self._communication(m, tokens)

    def communication_time(self, tokens: int) -> float:
        return self._communication(self.model, tokens)

    def _communication(self, m: ModelSpec, tokens: int) -> float:
        """Two ring all-reduces per layer (after attention and after the MLP) of the fp16
        activations: each GPU sends 2 × (TP−1)/TP of the buffer."""
        tp = self.hardware.tensor_parallel
        if tp == 1:
            return 0.0
        buffer = tokens * m.hidden_size * 2
        per_allreduce = self.hardware.allreduce_latency + (
            2 * (tp - 1) / tp * buffer / self.hardware.interconnect_bandwidth
        )
        return 2 * m.layers * per_allreduce
