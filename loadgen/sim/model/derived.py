"""A preset derived from a catalogue GPU and a model's config.json, for `--gpu ID
--model-config FILE --dtype DTYPE`: the datasheet's figures, the model's shape, vLLM's own
engine defaults, and starting efficiencies no measurement checked (so it says so, as an
uncalibrated bundled preset does, until a fit replaces them).
"""

from __future__ import annotations

from pathlib import Path

from loadgen.sim.model.catalogue import Gpu
from loadgen.sim.model.hf_config import Shape
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import MBU_CEILING, MFU_CEILING, Efficiency, PerfModel
from loadgen.sim.model.scheduler import EngineConfig

# The calibrated A100 bf16 presets reach MBU 0.63 and MFU 0.55: these shares of the
# ceilings. A derived preset starts at the same shares of its own GPU's ceilings.
MBU_SHARE = 0.63 / MBU_CEILING
MFU_SHARE = 0.55 / MFU_CEILING
HOST_OVERHEAD = 1.5e-3  # the A100 presets' CPU cost per step and per sequence
SEQUENCE_OVERHEAD = 20e-6
MEAN_OUTPUT_TOKENS = 256  # as the bundled presets
LARGE_GPU = 70 * 2**30  # vLLM's engine defaults (engine/arg_utils.py): on a GPU of at least
# 70 GiB that is not an A100, 8192 tokens and 1024 sequences per step; else 2048 and 256


def preset(gpu: Gpu, shape: Shape, dtype: str, tensor_parallel: int, config: str) -> Preset:
    """`shape` stored as `dtype` on `tensor_parallel` of `gpu`; ValueError when the weights
    do not fit or the GPU has no rate for the dtype."""
    hardware = gpu.hardware(tensor_parallel, dtype)
    efficiency = Efficiency(
        mbu=round(MBU_SHARE * hardware.mbu_ceiling, 2),
        mfu=round(MFU_SHARE * hardware.mfu_ceiling, 2),
        host_overhead=HOST_OVERHEAD,
        sequence_overhead=SEQUENCE_OVERHEAD,
    )
    large = gpu.memory >= LARGE_GPU and "a100" not in gpu.id
    engine = EngineConfig(
        max_num_seqs=1024 if large else 256, max_num_batched_tokens=8192 if large else 2048
    )
    try:
        perf = PerfModel(shape.spec(dtype), hardware, efficiency)
    except ValueError as exc:
        raise ValueError(f"--gpu {gpu.id} x{tensor_parallel}, {dtype}: {exc}") from None
    name = model_name(config)
    return Preset(
        name=f"{name}-{dtype}-tp{tensor_parallel}-{gpu.id}",
        description=f"{name} {dtype}, TP={tensor_parallel}, {gpu.name} (from the catalogue)",
        served_model_name=name,
        mean_output_tokens=MEAN_OUTPUT_TOKENS,
        perf=perf,
        engine=engine,
        uncalibrated=(
            f"derived from {gpu.id}'s datasheet; its efficiencies are the A100 presets' share "
            "of the GPU's ceilings: fit it to a capture (python -m loadgen.sim fit)"
        ),
        weights=dtype,
    )


def model_name(config: str) -> str:
    """A checkout's folder names the model (…/Meta-Llama-3-8B/config.json); else the file."""
    path = Path(config)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem
