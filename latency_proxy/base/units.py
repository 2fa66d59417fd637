"""Human-friendly durations and sizes for flags, env vars and config files."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|µs|ms|s|m|h)?\s*$")
_DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kib|kb|mib|mb|gib|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    None: 1,
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 10**6,
    "mib": 2**20,
    "gb": 10**9,
    "gib": 2**30,
}


def parse_duration(text: str | float | int) -> float:
    """'300ms' -> 0.3, '10m' -> 600.0; a bare number is seconds."""
    if isinstance(text, int | float):
        return float(text)
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 300ms, 30s, 10m)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_size(text: str | int) -> int:
    """'10MiB' -> 10485760; a bare number is bytes."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 4096, 10MiB)")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_UNITS[unit]


def format_duration(seconds: float) -> str:
    """600.0 -> '10m', 0.025 -> '25ms': the shortest unit parse_duration reads back exactly."""
    for unit, scale in (("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 1e-3)):
        count = seconds / scale
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds:g}s"


def format_size(size: int) -> str:
    """16777216 -> '16MiB', 32768 -> '32KiB'; a bare number of bytes otherwise."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)
