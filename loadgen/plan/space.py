"""The candidate space of a plan: which deployments to weigh, from PLAN.toml and the shorthand
flags. Pure but for reading the file and the presets.

A candidate is one replica's deployment — a preset (a model on some GPUs: bundled, or a
file) with vLLM engine flags applied — and the price of its GPUs. PLAN.toml:

    presets = ["llama-70b-awq-tp4-a100", "qwen-72b-gptq-tp4-a100"]   # bases to weigh
    max_replicas = 16            # the most replicas of one candidate a plan may buy
    [prices]                     # USD per GPU-hour, by GPU (a part of its name: "A100")
    A100 = 1.8
    [vary]                       # vLLM engine flags, each a list: every combination is tried
    tensor_parallel_size = [2, 4]
    max_num_seqs = [128, 256]
    max_num_batched_tokens = [2048, 8192]
    speculative = ["none", {draft = "llama-3-8b-awq-a100", tokens = 5, acceptance = 0.75}]
    [[deployment]]               # single deployments besides, each with its own flags
    preset = "qwen-72b-gptq-tp4-a100"
    args = "--max-num-seqs 64"

The flags --gpu-types, --dtypes and --gpu-prices say the same for the common case (without a
file: every bundled preset on those GPUs in those dtypes). Everything is checked before any
search: an unknown GPU or dtype, a price that is not a positive finite number, a GPU without
a price, a space past MAX_CANDIDATES: ValueError, one line naming the file or flag.
"""

from __future__ import annotations

import itertools
import json
import math
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset

MAX_CANDIDATES = 500  # a space larger than this is refused: bound it first
MAX_REPLICAS = 64  # the default bound on replicas of one candidate
# what a [vary] key becomes on vLLM's command line
VARIED = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_dtype": "--kv-cache-dtype",
    "speculative": "--speculative-config",
}
DTYPES = ("fp16", "int8", "awq", "gptq")  # what a preset's weights are stored as
DTYPE_ALIASES = {"bf16": "fp16", "16bit": "fp16", "float16": "fp16", "bfloat16": "fp16"}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One replica's deployment: a preset, engine flags, its GPUs and their price."""

    name: str  # unique within the plan: the preset and the flags varied
    spec: str  # the virtual: target (virtual:NAME or virtual:FILE.toml)
    args: str  # --virtual-args
    base: Preset  # the preset before the flags
    gpu: str
    usd_per_gpu_hour: float

    @property
    def dtype(self) -> str:
        return dtype_of(self.base)


@dataclass(frozen=True, slots=True)
class Space:
    candidates: tuple[Candidate, ...]
    max_replicas: int
    source: str  # what named the space: PLAN.toml's path, or the flags
    prices: dict[str, float] = field(default_factory=dict)


def dtype_of(preset: Preset) -> str:
    """How a preset's weights are stored: its quantization method, else by bytes per
    parameter (about 2: fp16/bf16, about 1: int8)."""
    model = preset.perf.model
    if model.quantization:
        return model.quantization
    return "fp16" if model.bytes_per_param >= 1.5 else "int8"


def dtype(text: str, where: str) -> str:
    key = text.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(
            f"{where}: unknown dtype {text!r}; known: {', '.join(DTYPES)} (bf16 = fp16)"
        )
    return key


def _squash(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


def gpu_matches(key: str, gpu: str) -> bool:
    """A GPU named in a plan ("A100", "h100", "Ascend 910B") names every GPU whose full name
    holds it, spaces, dashes and case aside."""
    return _squash(key) in _squash(gpu)


def known_gpus() -> list[str]:
    return sorted({presets.load(name).perf.hardware.gpu for name in presets.names()})


def gpu_of(key: str, where: str, gpus: Sequence[str]) -> str:
    """A GPU name the plan knows; ValueError naming `where` otherwise."""
    if not _squash(key) or not any(gpu_matches(key, g) for g in gpus):
        raise ValueError(f"{where}: unknown GPU {key!r}; known: {', '.join(gpus)}")
    return key


def price(value: Any, where: str) -> float:
    """USD per GPU-hour: a positive finite number, at most a million."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 < value <= 1_000_000:
        raise ValueError(f"{where}: price {value!r} is not a positive number of USD per GPU-hour")
    return float(value)


def parse_prices(text: str) -> dict[str, float]:
    """--gpu-prices "A100=1.8,H100=3.2"."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        gpu, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--gpu-prices: {part!r} is not GPU=USD") from None
        out[gpu.strip()] = price(number, f"--gpu-prices {gpu.strip()}")
    return out


def speculative(value: Any, where: str) -> str:
    """A [vary] speculative entry as --speculative-config JSON; "" for none."""
    if value in ("none", "", None):
        return ""
    if not isinstance(value, dict) or set(value) - {"draft", "tokens", "acceptance", "method"}:
        raise ValueError(f'{where}: speculative takes "none" or {{draft, tokens, acceptance}}')
    config: dict[str, Any] = {"num_speculative_tokens": value.get("tokens", 5)}
    if "draft" in value:
        config |= {"method": "draft_model", "model": value["draft"]}
    else:
        config["method"] = value.get("method", "ngram")
    if "acceptance" in value:
        config["acceptance_rate"] = value["acceptance"]
    return json.dumps(config, separators=(",", ":"))


def _variations(vary: Mapping[str, Any], where: str) -> tuple[list[list[str]], int]:
    """Each varied flag's choices (as vLLM flags) and how many combinations they make."""
    unknown = set(vary) - set(VARIED)
    if unknown:
        raise ValueError(
            f"{where}: [vary] takes {', '.join(VARIED)}, not {', '.join(sorted(unknown))}"
        )
    choices = []
    for key, values in vary.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: [vary] {key} must be a list of at least one value")
        flag = VARIED[key]
        if key == "speculative":
            texts = [speculative(v, f"{where}: [vary] {key}") for v in values]
            choices.append([f"{flag} {shlex.quote(t)}" if t else "" for t in texts])
        else:
            choices.append([f"{flag} {v}" for v in values])
    return choices, math.prod(len(c) for c in choices)


def _load(name: str, where: str) -> tuple[str, Preset]:
    """A preset by bundled name or file: its virtual: target and the preset."""
    if name.endswith(".toml") or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{where}: no such preset file {name}")
        return f"virtual:{name}", presets.load_file(path)
    try:
        return f"virtual:{name}", presets.load(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def read(
    file: str | None,
    gpu_types: Sequence[str] = (),
    dtypes: Sequence[str] = (),
    prices: Mapping[str, float] | None = None,
    max_replicas: int | None = None,
) -> Space:
    """The space PLAN.toml (or, without one, the flags) names; ValueError, one line."""
    table: dict[str, Any] = {}
    where = "the flags"
    if file is not None:
        where = f"--candidates {file}"
        try:
            table = tomllib.loads(Path(file).read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    unknown = set(table) - {
        "presets",
        "max_replicas",
        "prices",
        "vary",
        "deployment",
        "gpus",
        "dtypes",
    }
    if unknown:
        raise ValueError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    gpus = known_gpus()
    wanted_gpus = [gpu_of(g, where, gpus) for g in [*table.get("gpus", []), *gpu_types]]
    wanted_dtypes = [dtype(d, where) for d in [*table.get("dtypes", []), *dtypes]]
    file_prices = table.get("prices", {})
    if not isinstance(file_prices, dict):
        raise ValueError(f"{where}: [prices] must be a table of GPU = USD per GPU-hour")
    priced = {
        gpu_of(g, where, gpus): price(v, f"{where}: [prices] {g}") for g, v in file_prices.items()
    }
    priced |= {gpu_of(g, "--gpu-prices", gpus): v for g, v in (prices or {}).items()}
    bound = max_replicas if max_replicas is not None else table.get("max_replicas", MAX_REPLICAS)
    if not isinstance(bound, int) or isinstance(bound, bool) or not 1 <= bound <= 1000:
        raise ValueError(f"{where}: max_replicas must be a whole number from 1 to 1000")

    choices, combinations = _variations(table.get("vary", {}), where)
    bases = table.get("presets", [] if table.get("deployment") else presets.names())
    singles = table.get("deployment", [])
    if not isinstance(bases, list) or not isinstance(singles, list):
        raise ValueError(f"{where}: presets is a list of names, [[deployment]] a list of tables")
    size = len(bases) * combinations + len(singles)
    if size > MAX_CANDIDATES:
        raise ValueError(
            f"{where}: the space holds {size:,} candidates, more than {MAX_CANDIDATES}: bound "
            "it (fewer presets, fewer values in [vary], --gpu-types, --dtypes)"
        )
    found: list[tuple[str, Preset, str]] = []
    for base in bases:
        spec, preset = _load(str(base), where)
        for combo in itertools.product(*choices):
            found.append((spec, preset, " ".join(c for c in combo if c)))
    for n, single in enumerate(singles):
        if (
            not isinstance(single, dict)
            or "preset" not in single
            or set(single) - {"preset", "args"}
        ):
            raise ValueError(f"{where}: [[deployment]] {n + 1} takes preset and args")
        spec, preset = _load(str(single["preset"]), where)
        found.append((spec, preset, str(single.get("args", ""))))

    candidates = []
    for spec, preset, args in found:
        gpu = preset.perf.hardware.gpu
        if wanted_gpus and not any(gpu_matches(g, gpu) for g in wanted_gpus):
            continue
        if wanted_dtypes and dtype_of(preset) not in wanted_dtypes:
            continue
        keys = [g for g in priced if gpu_matches(g, gpu)]
        if not keys:
            raise ValueError(
                f"{where}: no price for {gpu} (give [prices] or --gpu-prices with a part of "
                "its name, e.g. A100=1.8)"
            )
        usd = priced[max(keys, key=len)]  # the most specific key that names it
        name = spec.removeprefix("virtual:") + (f" {args}" if args else "")
        candidates.append(Candidate(name, spec, args, preset, gpu, usd))
    if not candidates:
        raise ValueError(f"{where}: no candidate is left on those GPUs in those dtypes")
    names = [c.name for c in candidates]
    if len(set(names)) < len(names):
        raise ValueError(f"{where}: a deployment is named twice")
    return Space(tuple(candidates), bound, where, priced)
