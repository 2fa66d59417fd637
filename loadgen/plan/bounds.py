"""What a candidate can be told without running it: whether it fits in memory (and why not),
and roofline bounds that let a plan skip candidates that cannot win. Pure.

Both bounds are bounds of the twin itself, from the same performance model
(loadgen/sim/model/roofline.py), so a candidate they rule out is one whose virtual run could
not have done better:

- **A decode step's floor.** Every step streams the weights once (and a draft model's, k
  times), and pays the host's fixed cost: no step is shorter than that, and a request's TPOT
  is at least that over the tokens one step can give it (1 + k with k speculative tokens).
  A floor over the TPOT limit means no number of replicas meets it.
- **A replica's ceiling.** Output tokens per second are at most `max_num_seqs` × (1 + k)
  tokens per floor step, and at most what the GPUs' FLOP/s (at the preset's MFU) can compute
  at 2 FLOPs per parameter per token. The traffic's output tokens per second over that
  ceiling is a lower bound on the replicas it needs, and so on its cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.sim.model.presets import Preset
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.vllm_flags.table import parse_text

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the traffic asks of a deployment, at 1x."""

    requests_per_s: float
    output_tokens_per_s: float
    mean_input_tokens: float
    mean_output_tokens: float


def fit(base: Preset, args: str) -> tuple[Preset | None, str]:
    """The preset with the flags applied, or None and why it cannot be served (vLLM's own
    words when the weights or one request's KV cache do not fit)."""
    try:
        flags = parse_text(args)
        applied, _warnings = apply_flags(base, flags)
    except ValueError as exc:
        if "do not fit" not in str(exc):
            return None, str(exc)
        tp = flags.tensor_parallel_size or base.perf.hardware.tensor_parallel
        weights = base.perf.model.weight_bytes / tp / GIB
        memory = base.perf.hardware.gpu_memory / GIB
        return None, f"{exc}: {weights:.1f} GiB of weights per GPU, {memory:.0f} GiB each"
    return applied, ""


def memory_need(preset: Preset) -> str:
    """ "weights 39.5 GiB per GPU of 72.0 GiB usable": what one GPU holds, in words."""
    perf, engine = preset.perf, preset.engine
    usable = perf.hardware.gpu_memory * engine.gpu_memory_utilization
    weights = perf.weight_bytes_per_gpu
    draft = preset.draft
    if draft is not None:
        weights += draft.weight_bytes / perf.hardware.tensor_parallel
    return f"weights {weights / GIB:.1f} GiB per GPU of {usable / GIB:.1f} GiB usable"


def _speculated(preset: Preset) -> int:
    spec = preset.engine.speculation
    return spec.num_speculative_tokens if spec is not None else 0


def step_floor(preset: Preset) -> float:
    """Seconds: no engine step of this preset is shorter (weights streamed once, a draft
    model's k times, the host's fixed cost)."""
    perf = preset.perf
    hw, eff = perf.hardware, perf.efficiency
    bandwidth = hw.hbm_bandwidth * eff.mbu
    floor = perf.weight_bytes_per_gpu / bandwidth + eff.host_overhead
    draft = preset.draft
    if draft is not None:
        floor += _speculated(preset) * draft.weight_bytes / hw.tensor_parallel / bandwidth
    return floor


def tpot_floor(preset: Preset) -> float:
    """Seconds: no request's TPOT on this preset is lower."""
    return step_floor(preset) / (1 + _speculated(preset))


def ceiling(preset: Preset) -> float:
    """Output tokens/s one replica cannot exceed."""
    perf = preset.perf
    hw, eff = perf.hardware, perf.efficiency
    steps = preset.engine.max_num_seqs * (1 + _speculated(preset)) / step_floor(preset)
    compute = hw.tensor_parallel * hw.peak_flops * eff.mfu / (2 * perf.model.params)
    return min(steps, compute)


def replicas_floor(preset: Preset, traffic: Traffic, multiple: float) -> int:
    """Fewest replicas that could carry `multiple` times the traffic's output tokens."""
    return max(1, math.ceil(traffic.output_tokens_per_s * multiple / ceiling(preset) - 1e-9))


def power(preset: Preset, sequences: float, context: float) -> float:
    """Watts per GPU while a decode step of `sequences` sequences holding `context` tokens
    each runs: the roofline's power model (roofline.PerfModel.power)."""
    n = max(1, round(sequences))
    step = preset.perf.step_time(n, int(n * context), sequences=n)
    return preset.perf.power(step)
