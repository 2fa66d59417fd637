"""Presets: a model on some hardware, as a TOML data file (presets/NAME.toml).

A preset file has top-level `description`, `served_model_name`, `mean_output_tokens`, an
optional `uncalibrated` (why its figures are an estimate no measurement has checked: the
simulator warns at start and the docs' preset table marks it) and four tables — [model],
[hardware], [efficiency], [engine] — whose keys are the fields of model.ModelSpec,
model.Hardware, model.Efficiency and scheduler.EngineConfig. Each key is read as the
proxy's settings are (TYPES, keys.py): a declared type and range, durations with units
("12us", "1.5ms"), GPU memory as a size ("80GiB"), a number also as text ("4"). An unknown,
missing or out-of-range key is one line naming the file, the table and the key, so a typo or
a zero in a copied file neither falls back to a default nor divides by zero later.

A fitted preset (`python -m loadgen.sim fit`) also has a [fit] table: the signed held-out
prediction error of each figure it checked (HELD_OUT: "ttft_p90 = 0.07" is 7% over) and
their mean absolute, `error`. It travels with the file, so a prediction made from it can
say how far to trust it wherever the file is copied; a bundled preset has none.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import MISSING, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from latency_proxy.base.setting_types import Duration, Flag, Number, SettingType, Size, Text
from loadgen.sim.model import catalogue, keys
from loadgen.sim.model.roofline import Efficiency, Hardware, ModelSpec, PerfModel
from loadgen.sim.model.scheduler import BLOCK_SIZES, SCHEDULERS, EngineConfig

HELD_OUT = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")  # a fit's checked figures


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    description: str
    served_model_name: str
    mean_output_tokens: int
    perf: PerfModel
    engine: EngineConfig
    uncalibrated: str = ""  # why no measurement backs it; empty: calibrated or derived
    fit: dict[str, float] | None = None  # a fitted preset's held-out errors ([fit])
    weights: str = ""  # a preset derived from the catalogue: its --dtype (catalogue.DTYPES)

    @property
    def max_model_len(self) -> int:
        return self.perf.model.max_model_len

    @property
    def draft(self) -> ModelSpec | None:
        """The draft model speculative decoding runs beside the target, if any."""
        spec = self.engine.speculation
        return spec.draft if spec is not None else None

    @property
    def kv_capacity_tokens(self) -> int:
        return self.perf.kv_capacity_tokens(self.engine.gpu_memory_utilization, self.draft)

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes a token takes on each GPU: the target's, and the draft model's."""
        draft = self.draft
        own = self.perf.kv_bytes_per_token_per_gpu
        return own + (self.perf.kv_per_gpu(draft) if draft is not None else 0.0)

    @property
    def warning(self) -> str:
        """The line to show wherever the preset is used, when it is not calibrated."""
        if not self.uncalibrated:
            return ""
        return f"preset {self.name} is not calibrated against any measurement: {self.uncalibrated}"


def names() -> list[str]:
    return sorted(
        p.name.removesuffix(".toml") for p in _directory().iterdir() if p.name.endswith(".toml")
    )


def load(name: str) -> Preset:
    path = _directory() / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(names())}")
    return parse(name, tomllib.loads(path.read_text()))


def load_file(path: str | Path) -> Preset:
    """A preset file; ValueError, one line naming the file, for one that cannot be read,
    is not TOML or holds a key outside its type or range."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return parse(path.stem, data, str(path))


def dump(preset: Preset) -> str:
    """The preset as a file `load_file` reads back: durations in µs, sizes in bytes. An
    engine's speculative decoding is a vLLM flag (--speculative-config), not a preset key:
    ValueError."""
    if preset.engine.speculation is not None:
        raise ValueError("a preset file cannot hold --speculative-config: give it as a flag")
    lines = [
        f"description = {_toml(preset.description)}",
        f"served_model_name = {_toml(preset.served_model_name)}",
        f"mean_output_tokens = {preset.mean_output_tokens}",
    ]
    if preset.uncalibrated:
        lines.append(f"uncalibrated = {_toml(preset.uncalibrated)}")
    tables: dict[str, Any] = {
        "model": preset.perf.model,
        "hardware": preset.perf.hardware,
        "efficiency": preset.perf.efficiency,
        "engine": preset.engine,
    }
    for table, values in tables.items():
        lines.append(f"\n[{table}]")
        for f in fields(values):
            value = getattr(values, f.name)
            if value is None or value == "":  # unset: the default reads back
                continue
            kind = TYPES[table].get(f.name)
            if isinstance(kind, Duration):
                micro = f"{value * 1e6:.6f}".rstrip("0").rstrip(".")
                lines.append(f'{f.name} = "{micro}us"')
            elif isinstance(kind, Size):
                lines.append(f"{f.name} = {int(value)}")
            else:
                lines.append(f"{f.name} = {_toml(value)}")
    if preset.fit is not None:
        lines.append("\n[fit]")
        lines += [f"{key} = {value!r}" for key, value in preset.fit.items()]
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def parse(name: str, data: dict[str, Any], where: str = "") -> Preset:
    """A checked preset from a parsed TOML document: every key read by its type and range
    (TYPES), then the checks across keys. ValueError, one line naming `where` (the file;
    default "preset NAME") and the key."""
    where = where or f"preset {name}"
    data = dict(data)
    tables = {key: data.pop(key, {}) for key in TYPES if key}
    fit = _fit(where, data.pop("fit")) if "fit" in data else None
    top, model, hardware, efficiency, engine = (
        _table(where, table, data if not table else tables[table]) for table in TYPES
    )
    try:
        perf = PerfModel(ModelSpec(**model), Hardware(**hardware), Efficiency(**efficiency))
        preset = Preset(name=name, perf=perf, engine=EngineConfig(**engine), fit=fit, **top)
        _check(preset)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return preset


# a whole number no model's shape or engine setting reaches: a count, not a runaway
_COUNT = 2**31
_QUANTIZATIONS = tuple(sorted({w.quantization for w in catalogue.DTYPES.values()} - {""}))
_SHARE = Number(0, 1, "a share", zero_ok=False)
TYPES: dict[str, dict[str, SettingType]] = {
    "": {
        "description": Text(),
        "served_model_name": Text(),
        "mean_output_tokens": Number(1, 1_000_000, "a token count", whole=True, zero_ok=False),
        "uncalibrated": Text(),
    },
    "model": {
        # a test model's thousands up; "70" (for billions) is refused
        "params": Number(1e4, 1e14, "a parameter count", zero_ok=False),
        "bytes_per_param": Number(0.1, 8, "bytes", zero_ok=False),
        "layers": Number(1, 10_000, "a layer count", whole=True, zero_ok=False),
        "hidden_size": Number(1, 1_000_000, "a width", whole=True, zero_ok=False),
        "heads": Number(1, 100_000, "a head count", whole=True, zero_ok=False),
        "kv_heads": Number(1, 100_000, "a head count", whole=True, zero_ok=False),
        "head_dim": Number(1, 100_000, "a width", whole=True, zero_ok=False),
        "kv_cache_bytes": Number(0.25, 8, "bytes", zero_ok=False),
        "max_model_len": Number(1, _COUNT, "a token count", whole=True, zero_ok=False),
        "quantization": Text(_QUANTIZATIONS),
        "max_position_embeddings": Number(0, _COUNT, "a token count (0: unknown)", whole=True),
        "experts": Number(0, 100_000, "an expert count (0: dense)", whole=True),
        "experts_per_token": Number(0, 100_000, "an expert count", whole=True),
        "expert_params": Number(0, 1e14, "a parameter count"),
    },
    "hardware": {
        "gpu": Text(),
        "tensor_parallel": Number(1, 1024, "a GPU count", whole=True, zero_ok=False),
        "hbm_bandwidth": keys.MEMORY_BANDWIDTH,
        "peak_flops": keys.FLOPS,
        "gpu_memory": keys.MEMORY,
        "interconnect_bandwidth": keys.INTERCONNECT_BANDWIDTH,
        "allreduce_latency": keys.ALLREDUCE_LATENCY,
        "idle_watts": keys.IDLE_WATTS,
        "max_watts": keys.MAX_WATTS,
        "compute_watts": Number(0, 100_000, "watts"),
        "memory_watts": Number(0, 100_000, "watts"),
        "mbu_ceiling": _SHARE,
        "mfu_ceiling": _SHARE,
    },
    "efficiency": {
        "mbu": _SHARE,
        "mfu": _SHARE,
        "host_overhead": Duration(positive=False, high=1.0),
        "sequence_overhead": Duration(positive=False, high=0.1),
        "frontend_request": Duration(positive=False, high=1.0),
        "frontend_token": Duration(positive=False, high=0.01),
        "frontend_output_token": Duration(positive=False, high=0.01),
        "frontend_latency": Duration(positive=False, high=1.0),
    },
    "engine": {
        "max_num_seqs": Number(1, 1_000_000, "a sequence count", whole=True, zero_ok=False),
        "max_num_batched_tokens": Number(1, _COUNT, "a token count", whole=True, zero_ok=False),
        "gpu_memory_utilization": _SHARE,
        "block_size": keys.OneOf(BLOCK_SIZES),
        "enable_chunked_prefill": Flag(),
        "enable_prefix_caching": Flag(),
        "scheduler": Text(SCHEDULERS),
    },
}
_CLASSES: dict[str, type] = {
    "": Preset,
    "model": ModelSpec,
    "hardware": Hardware,
    "efficiency": Efficiency,
    "engine": EngineConfig,
}


def optional(table: str) -> set[str]:
    """The keys of a table ("" the top level) that may be left out: its class's defaults."""
    defaults = {f.name for f in fields(_CLASSES[table]) if f.default is not MISSING}
    return defaults & set(TYPES[table])


def _table(where: str, table: str, data: Any) -> dict[str, Any]:
    """One table's keys by TYPES."""
    return keys.read(where, table, data, TYPES[table], optional(table))


def _check(preset: Preset) -> None:
    """What no single key says: the shape is one, the power figures agree, the KV cache
    holds one request of max_model_len."""
    model, hardware = preset.perf.model, preset.perf.hardware
    if model.heads % model.kv_heads:
        raise ValueError(
            f"[model] kv_heads: {model.kv_heads} does not divide heads ({model.heads})"
        )
    if model.experts_per_token > model.experts or model.expert_params > model.params:
        raise ValueError("[model] experts_per_token and expert_params: at most experts and params")
    if hardware.idle_watts > hardware.max_watts:
        raise ValueError(
            f"[hardware] idle_watts: {hardware.idle_watts:g} is more than max_watts "
            f"({hardware.max_watts:g})"
        )
    if preset.kv_capacity_tokens < preset.max_model_len:
        raise ValueError(
            f"KV cache holds {preset.kv_capacity_tokens} tokens, "
            f"less than [model] max_model_len {preset.max_model_len}"
        )


def _fit(where: str, table: Any) -> dict[str, float]:
    """A [fit] table: known figures, each a finite number."""
    allowed = ("error", *HELD_OUT)
    if not isinstance(table, dict) or "error" not in table or set(table) - set(allowed):
        raise ValueError(f"{where}: [fit] takes error and {', '.join(HELD_OUT)}")
    out = {}
    for key, value in table.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise ValueError(f"{where}: [fit] {key} = {value!r} is not a finite number")
        out[key] = float(value)
    return out


def _directory() -> Any:
    return resources.files("loadgen.sim") / "presets"
