"""Parsers for loadgen's numeric flags that refuse what no run can use: nan, inf, a negative
or zero count, a value past any sensible bound. A `--rate nan` once built an endless
schedule (12 GB in two minutes, deaf to SIGTERM); each flag now says what is wrong with
its value and loadgen exits 2 before any load.

They are `type=` functions (or a flags.Flag's `parse`), so the check travels with the flag
into both engines. They raise BadValue: argparse prints its message as it is, and the
Locust engine, which reads text itself, catches it as a ValueError.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from latency_proxy.base.setting_types import WEEK_S, Duration, Number, SettingType
from latency_proxy.base.units import format_size, parse_size
from loadgen.inputs.jsonl import MAX_TOKENS as MAX_TOKENS  # the one limit, where files are read too

YEAR_S = 366 * 24 * 3600.0


class BadValue(argparse.ArgumentTypeError, ValueError):
    """A flag's value no run can use; the message says why."""


def checked(kind: SettingType, name: str) -> Callable[[str], Any]:
    """A parser of one value of `kind`, named for argparse's messages."""

    def parse(text: str) -> Any:
        try:
            return kind.read(text)
        except ValueError as exc:
            raise BadValue(str(exc)) from None

    parse.__name__ = name
    return parse


def parsed(value: Any, parse: Callable[[str], Any], flag: str) -> Any:
    """A flag's value, parsed when it is still text (the Locust engine keeps its custom
    arguments as text); a bad one is a ValueError that names the flag."""
    try:
        return parse(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def levels(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A comma-separated list of at least one value, each read by `item`."""

    def parse(text: str) -> list[Any]:
        values = [item(part) for part in text.split(",") if part.strip()]
        if not values:
            raise BadValue(f"{text!r}: give at least one value")
        return values

    parse.__name__ = getattr(item, "__name__", "levels") + " list"
    return parse


def duration(positive: bool = True, high: float = WEEK_S) -> Callable[[str], float]:
    return checked(Duration(positive, high), "duration")


def count(low: int, high: int, hint: str) -> Callable[[str], int]:
    return checked(Number(low, high, hint, whole=True), "count")


def real(low: float, high: float, hint: str, zero_ok: bool = True) -> Callable[[str], float]:
    return checked(Number(low, high, hint, zero_ok=zero_ok), "number")


def size(low: int, high: int, hint: str) -> Callable[[str], int]:
    """Bytes (4096, 140GB, 2039GB) from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = parse_size(text)
        except ValueError as exc:
            raise BadValue(str(exc)) from None
        if not low <= value <= high:
            raise BadValue(f"{text} is out of range; give {hint}, {low} to {format_size(high)}")
        return value

    parse.__name__ = "size"
    return parse


RATE = real(0, 100_000, "a rate in requests/s", zero_ok=False)
STREAMS = count(1, 100_000, "a number of streams")
SEED = count(0, 2**63 - 1, "a seed")
REQUESTS = count(1, 10**8, "a request count")


def shard(text: str) -> tuple[int, int]:
    """`i/N`, or `N` with the index from $JOB_COMPLETION_INDEX (a Kubernetes Indexed Job)."""
    index, sep, count = text.partition("/")
    if not sep:
        index, count = os.environ.get("JOB_COMPLETION_INDEX", ""), text
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise BadValue(
            f"not a shard: {text!r} (use i/N, or N with JOB_COMPLETION_INDEX set)"
        ) from None
    if not 0 <= i < n:
        raise BadValue(f"shard index {i} is not in 0..{n - 1}")
    return i, n
