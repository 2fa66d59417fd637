"""Presets: a model on some hardware, as a TOML data file (presets/NAME.toml).

A preset file has top-level `description`, `served_model_name`, `mean_output_tokens`, an
optional `uncalibrated` (why its figures are an estimate no measurement has checked: the
simulator warns at start and the docs' preset table marks it) and four tables — [model],
[hardware], [efficiency], [engine] — whose keys are the fields of model.ModelSpec,
model.Hardware, model.Efficiency and scheduler.EngineConfig. Durations
take units ("12us", "1.5ms"), GPU memory takes a size ("80GiB"). Unknown keys are errors,
so a typo in a copied file does not silently fall back to a default.

A fitted preset (`python -m loadgen.sim fit`) also has a [fit] table: the signed held-out
prediction error of each figure it checked (HELD_OUT: "ttft_p90 = 0.07" is 7% over) and
their mean absolute, `error`. It travels with the file, so a prediction made from it can
say how far to trust it wherever the file is copied; a bundled preset has none.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from latency_proxy.units import parse_duration, parse_size
from loadgen.sim.model.roofline import Efficiency, Hardware, ModelSpec, PerfModel
from loadgen.sim.model.scheduler import EngineConfig

_DURATIONS = {
    "allreduce_latency",
    "host_overhead",
    "sequence_overhead",
    "frontend_request",
    "frontend_token",
}
_SIZES = {"gpu_memory"}
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
    path = Path(path)
    return parse(path.stem, tomllib.loads(path.read_text()))


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
            if value is None:
                continue
            if f.name in _DURATIONS:
                micro = f"{value * 1e6:.6f}".rstrip("0").rstrip(".")
                lines.append(f'{f.name} = "{micro}us"')
            elif f.name in _SIZES:
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


def parse(name: str, data: dict[str, Any]) -> Preset:
    """A validated preset from a parsed TOML document."""
    data = dict(data)
    tables = {key: data.pop(key, {}) for key in ("model", "hardware", "efficiency", "engine")}
    fit = _fit(name, data.pop("fit")) if "fit" in data else None
    top = _take(
        Preset, data, ("description", "served_model_name", "mean_output_tokens", "uncalibrated")
    )
    if len(top.keys() - {"uncalibrated"}) != 3:
        raise ValueError(f"preset {name}: needs description, served_model_name, mean_output_tokens")
    if not isinstance(top.get("uncalibrated", ""), str):
        raise ValueError(f"preset {name}: uncalibrated must be a string (why)")
    perf = PerfModel(
        _build(ModelSpec, tables["model"]),
        _build(Hardware, tables["hardware"]),
        _build(Efficiency, tables["efficiency"]),
    )
    engine = _build(EngineConfig, tables["engine"])
    preset = Preset(name=name, perf=perf, engine=engine, fit=fit, **top)
    if preset.kv_capacity_tokens < preset.max_model_len:
        raise ValueError(
            f"preset {name}: KV cache holds {preset.kv_capacity_tokens} tokens, "
            f"less than max_model_len {preset.max_model_len}"
        )
    return preset


def _fit(name: str, table: Any) -> dict[str, float]:
    """A [fit] table: known figures, each a finite number."""
    allowed = ("error", *HELD_OUT)
    if not isinstance(table, dict) or "error" not in table or set(table) - set(allowed):
        raise ValueError(f"preset {name}: [fit] takes error and {', '.join(HELD_OUT)}")
    out = {}
    for key, value in table.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise ValueError(f"preset {name}: [fit] {key} = {value!r} is not a finite number")
        out[key] = float(value)
    return out


def _build(cls: type, table: dict[str, Any]) -> Any:
    values = _take(cls, dict(table), tuple(f.name for f in fields(cls)))
    try:
        return cls(**values)
    except TypeError as exc:  # a missing key
        raise ValueError(f"{cls.__name__}: {exc}") from None


def _take(cls: type, table: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    unknown = set(table) - set(allowed)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in _DURATIONS:
            value = parse_duration(value)
        elif key in _SIZES:
            value = float(parse_size(value))
        out[key] = value
    return out


def _directory() -> Any:
    return resources.files("loadgen.sim") / "presets"
