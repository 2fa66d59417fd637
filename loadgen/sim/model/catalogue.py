"""The GPU catalogue: each accelerator's datasheet figures and efficiency ceilings, read from
catalogue.toml, so a model on a GPU needs no hand-written preset (`--gpu ID`).

A GPU is named by its id (`a100-sxm-80gb`, `rtx-4090`) or an alias (`a100`, `4090`), in any
case. Its ceilings bound what a preset or a fit may claim of it. MFU: what bare matmuls of an
LLM's shapes reached on the H200 measured here (roofline.MFU_CEILING), for every GPU: no other
measurement of those shapes is published. MBU: weight streaming reached 0.86 of the H200's
measured copy rate (STREAMING_OF_COPY); a GPU's ceiling is that share of the copy rate
measured on it (`copy_fraction`, cited in the file), so a GDDR card, whose bare streams come
nearer its datasheet than HBM's do, may claim more of it. Without a measurement, the H200's.

The dtypes (DTYPES) are a checkpoint's weight formats as `--dtype` names them: how many bytes
a parameter takes (as the bundled presets count them) and which of the datasheet's rates its
matmuls run at. A GPU without that rate cannot run the dtype.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

from latency_proxy.base.setting_types import ListOf, Number, SettingType, Text
from loadgen.sim.model import keys
from loadgen.sim.model.roofline import MBU_CEILING, MFU_CEILING, Hardware

RATES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")
H200_COPY_FRACTION = 0.896  # 4.30 of 4.8 TB/s (docs/sim/h200-roofline.json)
STREAMING_OF_COPY = MBU_CEILING / H200_COPY_FRACTION


@dataclass(frozen=True, slots=True)
class Weights:
    """A weight format: bytes per parameter, the datasheet rate its matmuls run at, and the
    checkpoint's quantization method (vLLM's --quantization; empty: none)."""

    bytes_per_param: float
    rate: str
    quantization: str = ""
    words: str = ""


DTYPES = {
    "bf16": Weights(2, "bf16", words="16-bit weights and activations"),
    "fp16": Weights(2, "fp16", words="16-bit weights and activations"),
    "fp8": Weights(1, "fp8", "fp8", "8-bit float weights and activations (W8A8)"),
    "int8": Weights(1.03, "int8", words="int8 weights with scales, int8 activations (W8A8)"),
    "awq": Weights(0.56, "fp16", "awq", "4-bit weights, group-128 scales, 16-bit matmuls"),
    "gptq": Weights(0.56, "fp16", "gptq", "4-bit weights, group-128 scales, 16-bit matmuls"),
}
_TYPES: dict[str, SettingType] = {
    "name": Text(),
    "aliases": ListOf(Text(), split=False),
    "source": Text(),
    "flops": keys.Rates(RATES, keys.FLOPS),
    "memory": keys.MEMORY,
    "memory_bandwidth": keys.MEMORY_BANDWIDTH,
    "interconnect": Text(),
    "interconnect_bandwidth": keys.INTERCONNECT_BANDWIDTH,
    "allreduce_latency": keys.ALLREDUCE_LATENCY,
    "tdp_watts": keys.MAX_WATTS,
    "idle_watts": keys.IDLE_WATTS,
    "copy_fraction": Number(0.3, 1.0, "a share of the datasheet", zero_ok=False),
    "copy_source": Text(),
}
_OPTIONAL = ("aliases", "copy_fraction", "copy_source")


@dataclass(frozen=True, slots=True)
class Gpu:
    id: str
    name: str  # as nvidia-smi (or the vendor's tool) names it
    aliases: tuple[str, ...]
    source: str  # the datasheet its figures are from
    flops: dict[str, float]  # dense FLOP/s by input type
    memory: float  # bytes
    memory_bandwidth: float  # bytes/s
    interconnect: str
    interconnect_bandwidth: float  # bytes/s per GPU, one direction
    allreduce_latency: float  # seconds
    tdp_watts: float
    idle_watts: float
    copy_fraction: float = H200_COPY_FRACTION
    copy_source: str = ""

    @property
    def mbu_ceiling(self) -> float:
        return round(self.copy_fraction * STREAMING_OF_COPY, 3)

    @property
    def mfu_ceiling(self) -> float:
        return MFU_CEILING

    @property
    def ceiling_source(self) -> str:
        """Where the MBU ceiling comes from, in words."""
        if not self.copy_source:
            return "no bare-stream measurement published: the H200's ceiling"
        return f"{self.copy_fraction:.3g} of the datasheet in a bare stream ({self.copy_source})"

    def dtypes(self) -> list[str]:
        """The weight formats this GPU has a datasheet rate for."""
        return [name for name, w in DTYPES.items() if w.rate in self.flops]

    def peak_flops(self, dtype: str) -> float:
        """The datasheet rate a dtype's matmuls run at; ValueError naming the ones it has."""
        if dtype not in DTYPES:
            raise ValueError(f"--dtype {dtype}: not a dtype; known: {', '.join(DTYPES)}")
        rate = DTYPES[dtype].rate
        if rate not in self.flops:
            raise ValueError(
                f"--dtype {dtype}: {self.id} has no {rate} rate on its datasheet; "
                f"it runs {', '.join(self.dtypes())}"
            )
        return self.flops[rate]

    def hardware(self, tensor_parallel: int = 1, dtype: str = "bf16") -> Hardware:
        """A tensor-parallel group of this GPU running `dtype`. The dynamic power terms are
        such that either alone, at its ceiling, reaches the power limit."""
        above_idle = self.tdp_watts - self.idle_watts
        return Hardware(
            gpu=self.name,
            tensor_parallel=tensor_parallel,
            hbm_bandwidth=self.memory_bandwidth,
            peak_flops=self.peak_flops(dtype),
            gpu_memory=self.memory,
            interconnect_bandwidth=self.interconnect_bandwidth,
            allreduce_latency=self.allreduce_latency,
            idle_watts=self.idle_watts,
            max_watts=self.tdp_watts,
            compute_watts=round(above_idle / self.mfu_ceiling),
            memory_watts=round(above_idle / self.mbu_ceiling),
            mbu_ceiling=self.mbu_ceiling,
            mfu_ceiling=self.mfu_ceiling,
        )


def gpu(name: str) -> Gpu:
    """The GPU of this id or alias (any case); ValueError listing the known ids."""
    found = _by_name().get(name.lower())
    if found is None:
        raise ValueError(f"--gpu {name}: not in the catalogue; known: {', '.join(names())}")
    return found


def names() -> list[str]:
    return list(_all())


def gpus() -> list[Gpu]:
    return list(_all().values())


@functools.cache
def _all() -> dict[str, Gpu]:
    path = resources.files("loadgen.sim.model") / "catalogue.toml"
    data = tomllib.loads(path.read_text())
    out = {}
    for gpu_id, table in data["gpus"].items():
        values = keys.read("catalogue.toml", f"gpus.{gpu_id}", table, _TYPES, _OPTIONAL)
        out[gpu_id] = Gpu(id=gpu_id, **values)
    return out


@functools.cache
def _by_name() -> dict[str, Gpu]:
    table: dict[str, Gpu] = {}
    for g in _all().values():
        for name in (g.id, *g.aliases):
            if table.setdefault(name.lower(), g) is not g:
                raise ValueError(f"catalogue.toml: {name} names two GPUs")
    return table
