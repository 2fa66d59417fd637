"""The candidate space of a plan: which deployments to weigh, from PLAN.toml and the shorthand
flags. Pure but for reading the file, the presets and the GPU catalogue.

A candidate is one replica's deployment — a model on a tensor-parallel group of GPUs in a
dtype, with vLLM engine flags — and the price of its GPUs. It comes either as a preset
(bundled, or a file: as it is), or built from the GPU catalogue (loadgen/sim/model/
catalogue.py): a model's shape, engine settings and efficiencies taken from a preset, on
every GPU × tensor parallelism × dtype asked for. PLAN.toml:

    presets = ["llama-70b-awq-tp4-a100", "qwen-72b-gptq-tp4-a100"]   # as they are
    max_replicas = 16            # the most replicas of one candidate a plan may buy
    [space]                      # built from the catalogue
    models = ["llama-70b-bf16-tp4-a100",   # a preset: the model's shape and efficiencies
              {model_config = "llama-3-8b/config.json"}]   # or a config.json (shapes.py)
    gpus = ["a100", "h100", "l40s"]         # catalogue ids or aliases
    tensor_parallel = [1, 2, 4, 8]          # GPUs per replica
    dtypes = ["bf16", "awq"]
    [prices]                     # USD per GPU-hour, by catalogue id or alias
    a100 = 1.8
    [vary]                       # vLLM engine flags, each a list: every combination is tried
    max_num_seqs = [128, 256]
    max_num_batched_tokens = [2048, 8192]
    speculative = ["none", {draft = "llama-3-8b-awq-a100", tokens = 5, acceptance = 0.75}]
    [[deployment]]               # single deployments besides, each with its own flags
    preset = "qwen-72b-gptq-tp4-a100"
    args = "--max-num-seqs 64"

A model_config path is relative to PLAN.toml's folder. The flags --models (presets, or
config.json files by path), --gpu-types, --dtypes, --tensor-parallel and --gpu-prices say the
same for the common case; --gpu-types and --dtypes also narrow the presets weighed (without a
file or --models: every bundled preset). Everything is checked before any search: an unknown
GPU or dtype, a price that is not a positive finite number, a GPU without a price, a space
past MAX_CANDIDATES: ValueError, one line naming the file or flag.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.engine.targets import VIRTUAL
from loadgen.plan import shapes
from loadgen.sim.model import catalogue, presets
from loadgen.sim.model.presets import Preset

MAX_CANDIDATES = 500  # a space larger than this is refused: bound it first
MAX_REPLICAS = 64  # the default bound on replicas of one candidate
TENSOR_PARALLEL = (1, 2, 4, 8)  # --tensor-parallel's default
# what a [vary] key becomes on vLLM's command line
VARIED = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_dtype": "--kv-cache-dtype",
    "speculative": "--speculative-config",
}
SAME_DTYPE = {"bf16": "fp16"}  # one format as far as a filter is concerned
TOP = ("presets", "max_replicas", "space", "prices", "vary", "deployment")
SPACE = ("models", "gpus", "tensor_parallel", "dtypes")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One replica's deployment: a preset, engine flags, its GPUs and their price."""

    name: str  # unique within the plan: the preset and the flags varied
    spec: str  # the virtual: target (virtual:NAME or virtual:FILE.toml; "" until written)
    args: str  # --virtual-args
    base: Preset | None  # the preset before the flags (None: it cannot be built, `refused`)
    gpu: str  # the catalogue's id, or the preset's GPU name when the catalogue lacks it
    usd_per_gpu_hour: float
    dtype: str
    tensor_parallel: int
    refused: str = ""  # why it cannot be built (a dtype the GPU has no rate for)
    built: bool = False  # from the catalogue: its preset file is written before its search
    # of a config.json (shapes.py): the --gpu, --model-config, --dtype and
    # --tensor-parallel-size that start `args`, naming the model on the catalogue
    model_args: str = ""

    @property
    def engine_args(self) -> str:
        """`args` without the flags naming the model: the vLLM engine flags alone."""
        return self.args.removeprefix(self.model_args).strip()


@dataclass(frozen=True, slots=True)
class Space:
    candidates: tuple[Candidate, ...]
    max_replicas: int
    source: str  # what named the space: PLAN.toml's path, or the flags
    prices: dict[str, float] = field(default_factory=dict)  # by catalogue id


@dataclass(frozen=True, slots=True)
class Asked:
    """What the flags ask for, beside (or instead of) PLAN.toml."""

    models: tuple[str, ...] = ()
    gpu_types: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    tensor_parallel: tuple[int, ...] = ()
    prices: str = ""
    max_replicas: int | None = None


def dtype_of(preset: Preset) -> str:
    """How a preset's weights are stored (a catalogue dtype): its quantization method, else
    by bytes per parameter (about 2: fp16/bf16, about 1: int8)."""
    model = preset.perf.model
    if model.quantization:
        return model.quantization
    return "fp16" if model.bytes_per_param >= 1.5 else "int8"


def _dtype(text: str, where: str) -> str:
    key = text.strip().lower()
    if key not in catalogue.DTYPES:
        raise ValueError(f"{where}: unknown dtype {text!r}; known: {', '.join(catalogue.DTYPES)}")
    return key


def _same(a: str, b: str) -> bool:
    return SAME_DTYPE.get(a, a) == SAME_DTYPE.get(b, b)


def gpu_id(name: str, where: str) -> str:
    """The catalogue id a GPU name or alias stands for; ValueError naming `where`."""
    try:
        return catalogue.gpu(name.strip()).id
    except ValueError:
        known = ", ".join(catalogue.names())
        raise ValueError(f"{where}: unknown GPU {name!r}; known: {known}") from None


def gpu_of(preset: Preset) -> str:
    """A preset's GPU as the catalogue's id (its name, where the catalogue lacks it)."""
    name = preset.perf.hardware.gpu
    return next((g.id for g in catalogue.gpus() if g.name == name), name)


def price(value: Any, where: str) -> float:
    """USD per GPU-hour: a positive finite number, at most a million."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 < value <= 1_000_000:
        raise ValueError(f"{where}: price {value!r} is not a positive number of USD per GPU-hour")
    return float(value)


def parse_prices(text: str) -> dict[str, float]:
    """--gpu-prices "a100=1.8,h100=3.2": by catalogue id."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        gpu, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--gpu-prices: {part!r} is not GPU=USD") from None
        out[gpu_id(gpu, "--gpu-prices")] = price(number, f"--gpu-prices {gpu.strip()}")
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


def _variations(vary: Any, where: str) -> list[list[str]]:
    """Each varied flag's choices, as vLLM flags."""
    if not isinstance(vary, dict):
        raise ValueError(f"{where}: [vary] must be a table of lists")
    unknown = sorted(set(vary) - set(VARIED))
    if unknown:
        raise ValueError(f"{where}: [vary] takes {', '.join(VARIED)}, not {', '.join(unknown)}")
    choices = []
    for key, values in vary.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: [vary] {key} must be a list of at least one value")
        if key == "tensor_parallel_size" and any(
            not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64 for v in values
        ):
            raise ValueError(f"{where}: [vary] {key} takes whole numbers from 1 to 64")
        if key == "speculative":
            texts = [speculative(v, f"{where}: [vary] {key}") for v in values]
            choices.append([f"{VARIED[key]} {shlex.quote(t)}" if t else "" for t in texts])
        else:
            choices.append([f"{VARIED[key]} {shlex.quote(str(v))}" for v in values])
    return choices


def _own_tensor_parallel(combo: tuple[str, ...]) -> tuple[int | None, tuple[str, ...]]:
    """A combination's varied tensor-parallel size (None: not varied) and its other flags."""
    flag = f"{VARIED['tensor_parallel_size']} "
    sizes = [int(word.removeprefix(flag)) for word in combo if word.startswith(flag)]
    return (sizes[0] if sizes else None), tuple(w for w in combo if not w.startswith(flag))


def _load(name: str, where: str) -> tuple[str, Preset]:
    """A preset by bundled name or file: its virtual: target and the preset."""
    if name.endswith(".toml") or "/" in name:
        if not Path(name).is_file():
            raise ValueError(f"{where}: no such preset file {name}")
        try:
            return f"virtual:{name}", presets.load_file(name)
        except (ValueError, TypeError, KeyError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{where}: {name}: {exc}") from None
    try:
        return f"virtual:{name}", presets.load(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _list(table: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = table.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"{where}: {key} must be a list")
    return value


def build(model: Preset, gpu: catalogue.Gpu, tp: int, dtype: str) -> tuple[Preset | None, str]:
    """`model`'s shape, engine and efficiencies on `tp` of `gpu` in `dtype`, a datasheet
    estimate (its efficiencies kept under the GPU's ceilings); None and why for a dtype the
    GPU has no rate for, or weights that fit in none of its memory."""
    weights = catalogue.DTYPES[dtype]
    try:
        hardware = gpu.hardware(tp, dtype)
    except ValueError as exc:
        return None, str(exc).removeprefix(f"--dtype {dtype}: ")
    shape = dataclasses.replace(
        model.perf.model, bytes_per_param=weights.bytes_per_param, quantization=weights.quantization
    )
    eff = model.perf.efficiency
    efficiency = dataclasses.replace(
        eff,
        mbu=min(eff.mbu, round(hardware.mbu_ceiling * 0.99, 3)),
        mfu=min(eff.mfu, round(hardware.mfu_ceiling * 0.99, 3)),
    )
    name = f"{model.served_model_name}-{dtype}-tp{tp}-{gpu.id}"
    try:
        perf = dataclasses.replace(
            model.perf, model=shape, hardware=hardware, efficiency=efficiency
        )
    except ValueError as exc:  # PerfModel: the weights do not fit
        need = shape.weight_bytes / tp / 2**30
        return None, f"{exc}: {need:.1f} GiB of weights per GPU, {gpu.memory / 2**30:.0f} GiB each"
    why = (
        f"built from the catalogue's datasheet of the {gpu.name} with {model.name}'s "
        "efficiencies; no measurement on this GPU"
    )
    return dataclasses.replace(model, name=name, perf=perf, uncalibrated=why, fit=None), ""


def read(file: str | None, asked: Asked = Asked()) -> Space:
    """The space PLAN.toml (or, without one, the flags) names; ValueError, one line."""
    table, where = _table(file)
    axes = _axes(table, file, asked, where)
    choices = _variations(table.get("vary", {}), where)
    singles = _list(table, "deployment", where)
    bases = _list(table, "presets", where)
    if not bases and not singles and not axes.models:
        bases = presets.names()
    to_build = len(axes.models) * len(axes.gpus or [None]) * len(axes.tps)
    to_build *= len(axes.dtypes or [None])
    size = (len(bases) + to_build) * math.prod(len(c) for c in choices) + len(singles)
    if size > MAX_CANDIDATES:
        raise ValueError(
            f"{where}: the space holds {size:,} candidates, more than {MAX_CANDIDATES}: bound "
            "it (fewer models, GPUs, tensor-parallel sizes, dtypes or values in [vary])"
        )
    if axes.models and (not axes.gpus or not axes.dtypes):
        raise ValueError(
            f"{where}: models are built on GPUs in dtypes: name both (--gpu-types, --dtypes)"
        )
    builder = _Builder(where, axes, choices)
    for base in bases:
        builder.preset(str(base))
    for model in axes.models:
        builder.model(*model)
    for n, single in enumerate(singles):
        builder.deployment(n, single)
    if not builder.found:
        raise ValueError(f"{where}: no candidate is left on those GPUs in those dtypes")
    names = [c.name for c in builder.found]
    if len(set(names)) < len(names):
        raise ValueError(f"{where}: a deployment is named twice")
    return Space(tuple(builder.found), axes.bound, where, axes.priced)


def _table(file: str | None) -> tuple[dict[str, Any], str]:
    """PLAN.toml's table (empty without one) and how to name it in a message."""
    if file is None:
        return {}, "the flags"
    where = f"--candidates {file}"
    try:
        table = tomllib.loads(Path(file).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    unknown = sorted(set(table) - set(TOP))
    if unknown:
        raise ValueError(f"{where}: unknown keys {', '.join(unknown)}; it takes {', '.join(TOP)}")
    return table, where


@dataclass(frozen=True, slots=True)
class _Axes:
    """The space's axes, from the file and the flags together, each checked."""

    # each model with what named it and the folder a config.json path is relative to
    models: list[tuple[Any, str, Path]]
    gpus: list[str]
    dtypes: list[str]
    tps: list[int]
    priced: dict[str, float]
    bound: int


def _axes(table: Mapping[str, Any], file: str | None, asked: Asked, where: str) -> _Axes:
    space = table.get("space", {})
    if not isinstance(space, dict) or set(space) - set(SPACE):
        raise ValueError(f"{where}: [space] takes {', '.join(SPACE)}")
    folder = Path(file).parent if file is not None else Path()
    models = [(m, f"{where}: [space] models", folder) for m in _list(space, "models", where)]
    models += [(m, "--models", Path()) for m in asked.models]
    gpus = [gpu_id(str(g), where) for g in [*_list(space, "gpus", where), *asked.gpu_types]]
    dtypes = [_dtype(str(d), where) for d in [*_list(space, "dtypes", where), *asked.dtypes]]
    tps = [*_list(space, "tensor_parallel", where), *asked.tensor_parallel] or TENSOR_PARALLEL
    if any(not isinstance(t, int) or isinstance(t, bool) or not 1 <= t <= 64 for t in tps):
        raise ValueError(f"{where}: tensor_parallel takes whole numbers from 1 to 64")
    prices = table.get("prices", {})
    if not isinstance(prices, dict):
        raise ValueError(f"{where}: [prices] must be a table of GPU = USD per GPU-hour")
    priced = {gpu_id(g, where): price(v, f"{where}: [prices] {g}") for g, v in prices.items()}
    priced |= parse_prices(asked.prices)
    bound = asked.max_replicas or table.get("max_replicas", MAX_REPLICAS)
    if not isinstance(bound, int) or isinstance(bound, bool) or not 1 <= bound <= 1000:
        raise ValueError(f"{where}: max_replicas must be a whole number from 1 to 1000")
    return _Axes(models, gpus, dtypes, list(tps), priced, bound)


class _Builder:
    """The candidates, each under every combination of the varied flags."""

    def __init__(self, where: str, axes: _Axes, choices: list[list[str]]) -> None:
        self.where = where
        self.axes = axes
        self.choices = choices
        self.found: list[Candidate] = []

    def usd(self, gpu: str) -> float:
        if gpu not in self.axes.priced:
            raise ValueError(
                f"{self.where}: no price for {gpu} (give [prices] or --gpu-prices {gpu}=USD)"
            )
        return self.axes.priced[gpu]

    def add(
        self,
        label: str,
        spec: str,
        base: Preset | None,
        at: tuple[str, int, str],  # GPU, tensor parallelism, dtype
        refused: str = "",
        built: bool = False,
        model_args: str = "",
        combos: Iterable[tuple[str, ...]] | None = None,  # default: every varied combination
    ) -> None:
        gpu, tp, dtype = at
        for combo in itertools.product(*self.choices) if combos is None else combos:
            args = " ".join(filter(None, combo))
            name = label + (f" {args}" if args else "")
            flags = " ".join(filter(None, (model_args, args)))
            self.found.append(
                Candidate(
                    name, spec, flags, base, gpu, self.usd(gpu), dtype, tp, refused, built,
                    model_args,
                )
            )  # fmt: skip

    def preset(self, name: str) -> None:
        """A preset as it is, unless the GPUs or dtypes asked for leave it out."""
        gpus, dtypes = self.axes.gpus, self.axes.dtypes
        spec, preset = _load(name, self.where)
        gpu, dtype = gpu_of(preset), dtype_of(preset)
        if (gpus and gpu not in gpus) or (dtypes and not any(_same(dtype, d) for d in dtypes)):
            return
        at = (gpu, preset.perf.hardware.tensor_parallel, dtype)
        self.add(spec.removeprefix(VIRTUAL), spec, preset, at)

    def model(self, name: Any, named_by: str, relative_to: Path) -> None:
        """A model (a preset's, or a config.json's) on every GPU x tensor parallelism x dtype."""
        every = list(itertools.product(self.axes.gpus, self.axes.tps, self.axes.dtypes))
        config = shapes.named(name, relative_to, named_by)
        if config is not None:
            # a varied --tensor-parallel-size is the candidate's own: its model is built on
            # that count and names it once (the axis's count under it is the same candidate)
            grouped: dict[tuple[str, int, str], list[tuple[str, ...]]] = {}
            for gpu, tp, dtype in every:
                for combo in itertools.product(*self.choices):
                    varied, rest = _own_tensor_parallel(combo)
                    combos = grouped.setdefault((gpu, varied or tp, dtype), [])
                    if rest not in combos:
                        combos.append(rest)
            for (gpu, tp, dtype), combos in grouped.items():
                derived, label, why = shapes.build(config, gpu, tp, dtype)
                flags = shapes.model_args(config, gpu, tp, dtype)
                at = (gpu, tp, dtype)
                self.add(label, VIRTUAL, derived, at, why, model_args=flags, combos=combos)
            return
        spec, model = _load(str(name), self.where)
        own = (gpu_of(model), model.perf.hardware.tensor_parallel)
        for gpu, tp, dtype in every:
            if (gpu, tp) == own and _same(dtype, dtype_of(model)):  # the preset itself
                self.add(spec.removeprefix(VIRTUAL), spec, model, (gpu, tp, dtype))
                continue
            built, why = build(model, catalogue.gpu(gpu), tp, dtype)
            label = built.name if built else f"{model.served_model_name}-{dtype}-tp{tp}-{gpu}"
            self.add(label, "", built, (gpu, tp, dtype), why, built=True)

    def deployment(self, n: int, single: Any) -> None:
        """A [[deployment]]: one preset with its own flags, nothing varied."""
        if (
            not isinstance(single, dict)
            or "preset" not in single
            or set(single) - {"preset", "args"}
        ):
            raise ValueError(f"{self.where}: [[deployment]] {n + 1} takes preset and args")
        spec, preset = _load(str(single["preset"]), self.where)
        args, gpu = str(single.get("args", "")), gpu_of(preset)
        name = spec.removeprefix("virtual:") + (f" {args}" if args else "")
        tp = preset.perf.hardware.tensor_parallel
        dtype = dtype_of(preset)
        self.found.append(Candidate(name, spec, args, preset, gpu, self.usd(gpu), dtype, tp))
