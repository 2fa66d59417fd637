"""Candidates of a model named by its Hugging Face config.json instead of a preset: the
model's own shape (layers, widths, heads, KV heads, vocabulary, experts) on each catalogue
GPU × tensor parallelism × dtype. Pure but for reading the file.

Each is the bare `virtual:` target with `--virtual-args "--gpu ID --model-config FILE
--dtype DTYPE --tensor-parallel-size N"` (engine/virtual.py builds its preset, as it does
for a person who types that), so memory, the roofline bounds and every capacity search use
the one preset that command builds, and plan.json's argv is that command.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.engine import virtual
from loadgen.engine.targets import VIRTUAL
from loadgen.sim.model import catalogue, derived, hf_config
from loadgen.sim.model.hf_config import Shape
from loadgen.sim.model.presets import Preset
from loadgen.sim.vllm_flags.table import parse_text

GIB = 2**30


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model named by its config.json: the path the searches are given, and its shape."""

    path: str
    shape: Shape


def named(entry: Any, folder: Path, where: str) -> ModelConfig | None:
    """The config.json a model entry names — `{model_config = "PATH"}` in PLAN.toml, or a
    string ending in .json — relative to `folder`, made absolute; None for a preset.
    ValueError, one line naming `where`, the file and the problem, for one that is
    unreadable or not a model's config.json."""
    if isinstance(entry, dict):
        if set(entry) != {"model_config"} or not isinstance(entry["model_config"], str):
            raise ValueError(f'{where}: a model is a preset or {{model_config = "config.json"}}')
        text = entry["model_config"]
    elif isinstance(entry, str) and entry.endswith(".json"):
        text = entry
    else:
        return None
    path = str((folder / text).absolute())  # a search may run in another directory (Ray)
    return ModelConfig(path, hf_config.read(path, where))


def model_args(model: ModelConfig, gpu: str, tp: int, dtype: str) -> str:
    """The --virtual-args that put the model on `tp` of `gpu` in `dtype`."""
    words = ["--gpu", gpu, "--model-config", model.path, "--dtype", dtype]
    return shlex.join([*words, "--tensor-parallel-size", str(tp)])


def build(model: ModelConfig, gpu: str, tp: int, dtype: str) -> tuple[Preset | None, str, str]:
    """The preset `virtual:` builds for the model on `tp` of `gpu` in `dtype`, its name, and
    (None and) why not: weights that fit in none of its memory, a dtype it has no rate for."""
    label = f"{derived.model_name(model.path)}-{dtype}-tp{tp}-{gpu}"
    flags = parse_text(model_args(model, gpu, tp, dtype))
    try:
        preset = virtual.base(VIRTUAL, flags)
    except ValueError as exc:
        why = str(exc).removeprefix("--virtual-args: ")
        # the GPU, count and dtype it names are in the candidate's name: the reason alone
        for named_flags in (f"--dtype {dtype}: ", f"--gpu {gpu} x{tp}, {dtype}: "):
            why = why.removeprefix(named_flags)
        if "do not fit" in why:
            need = model.shape.spec(dtype).weight_bytes / tp / GIB
            each = catalogue.gpu(gpu).memory / GIB
            why += f": {need:.1f} GiB of weights per GPU, {each:.0f} GiB each"
        return None, label, why
    return preset, preset.name, ""
