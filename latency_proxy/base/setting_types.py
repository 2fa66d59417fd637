"""The declared type and range of each setting, read the same from every source.

A value arrives as a flag's or an environment variable's text, or as a TOML value (a
number, a boolean, a list, a table). Each type reads either, and refuses what it cannot
hold with the reason (wrong type, not finite, negative, out of range, a file that is not
there), so no value the proxy cannot run with gets past the start: a NaN timeout would
break every request later, a boolean read as a port would bind port 1.
"""

from __future__ import annotations

import math
import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from latency_proxy.base.units import format_duration, format_size, parse_duration, parse_size

WEEK_S = 7 * 24 * 3600.0  # longer than any timeout a proxy needs; bounds the loop's timers
MAX_SIZE = 2**32  # 4 GiB: past any body, head or event a proxy should hold
_SPLIT = re.compile(r"[,\s]+")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingType(Protocol):
    """Reads one setting's value from any source; ValueError says what is wrong with it."""

    def read(self, value: Any) -> Any: ...

    @property
    def limits(self) -> str:
        """The range as --help states it; empty where there is none to state."""
        ...

    @property
    def metavar(self) -> str:
        """What --help calls the flag's value (DURATION, SIZE, N); empty: argparse's own."""
        ...


def shown(value: Any) -> str:
    """A value as the message names it: TOML's spelling for the types TOML has."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if isinstance(value, int) else type(value).__name__


def _number(value: float) -> str:
    """1000000 rather than 1e+06: a bound as the user would type it."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _within(number: float, low: float, high: float, zero_ok: bool, hint: str) -> None:
    """Refuses a number past its range, naming which way."""
    if math.isnan(number) or math.isinf(number):
        problem = "is not finite"
    elif number < 0 <= low:
        problem = "is negative"
    elif number == 0 and not zero_ok:
        problem = "is zero"
    elif number < low:
        problem = f"is less than {_number(low)}"
    elif number > high:
        problem = f"is more than {_number(high)}"
    else:
        return
    raise ValueError(f"{shown(number)} {problem}; give {hint}")


def _numeric(value: Any, text: Callable[[str], float], whole: bool, hint: str) -> float:
    """A number from text (read by `text`) or from a TOML number (a boolean is none)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, int if whole else int | float) and not isinstance(value, bool):
        return value
    raise ValueError(f"expected {hint}, got {shown(value)}")


@dataclass(frozen=True, slots=True)
class Duration:
    """Seconds, finite; text may carry a unit (300ms, 30s, 10m)."""

    positive: bool = True  # False: 0 is allowed (it means 'never' or 'at once')
    high: float = WEEK_S
    metavar = "DURATION"

    @property
    def limits(self) -> str:
        return f"{'above 0' if self.positive else '0'} up to {format_duration(self.high)}"

    def read(self, value: Any) -> float:
        hint = f"a duration {'' if self.positive else 'from '}{self.limits}, e.g. 30s"
        number = float(_numeric(value, _seconds, False, hint))
        _within(number, 0.0, self.high, not self.positive, hint)
        return number


def _seconds(text: str) -> float:
    try:
        return float(text)  # 'nan' and 'inf' too: refused by name, not as 'not a duration'
    except ValueError:
        return parse_duration(text)


@dataclass(frozen=True, slots=True)
class Number:
    """A finite number in [low, high]; `whole`: a count, where a fraction or a boolean is
    refused, not rounded; 0 itself only where `zero_ok` (a rate of 0 sends nothing)."""

    low: float
    high: float
    hint: str = "a number"
    whole: bool = False
    zero_ok: bool = True
    metavar: str = "N"

    @property
    def limits(self) -> str:
        above = "above " if not self.zero_ok and self.low == 0 else ""
        return f"{above}{_number(self.low)} to {_number(self.high)}"

    def read(self, value: Any) -> float:
        number = _numeric(value, self._text, self.whole, self.hint)
        _within(number, self.low, self.high, self.zero_ok, f"{self.hint}, {self.limits}")
        return number if self.whole else float(number)

    def _text(self, text: str) -> float:
        if self.whole:
            if re.fullmatch(r"\s*[+-]?\d+\s*", text) is None:
                raise ValueError(f"{shown(text)} is not {self.hint}")
            return int(text)
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{shown(text)} is not {self.hint}") from None


@dataclass(frozen=True, slots=True)
class Size:
    """Bytes from `low` to `high`; text may carry a unit (4096, 64KiB, 16MiB, 80GiB), and a
    number must be whole."""

    low: int = 1
    high: int = MAX_SIZE
    example: str = "16MiB"
    metavar = "SIZE"

    @property
    def limits(self) -> str:
        low = "1 byte" if self.low == 1 else format_size(self.low)
        return f"{low} to {format_size(self.high)}"

    def read(self, value: Any) -> int:
        hint = f"a size from {self.limits}, e.g. {self.example}"
        if isinstance(value, str):
            if value.strip().startswith("-"):
                raise ValueError(f"{shown(value)} is negative; give {hint}")
            try:
                number = parse_size(value)
            except ValueError:
                raise ValueError(f"{shown(value)} is not {hint}") from None
        elif isinstance(value, int | float) and not isinstance(value, bool) and value % 1 == 0:
            number = int(value)
        else:
            raise ValueError(f"expected {hint}, got {shown(value)}")
        _within(number, self.low, self.high, False, hint)
        return number


@dataclass(frozen=True, slots=True)
class Flag:
    """true or false; text says so in words (true/false, yes/no, on/off, 1/0)."""

    limits = ""
    metavar = ""

    def read(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"expected true or false, got {shown(value)}")


@dataclass(frozen=True, slots=True)
class Text:
    """A string, optionally one of a fixed set."""

    choices: tuple[str, ...] = ()
    limits = ""
    metavar = ""

    def read(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"expected {self._hint()}, got {shown(value)}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{shown(value)} is not {self._hint()}")
        return value

    def _hint(self) -> str:
        return "one of " + ", ".join(self.choices) if self.choices else "a non-empty string"


@dataclass(frozen=True, slots=True)
class ExistingFile:
    """A path to a regular file this process can read, and, if `check` is given, one that
    check accepts (it raises ValueError saying what the file is not)."""

    check: Callable[[str], None] | None = None
    limits = ""
    metavar = "FILE"

    def read(self, value: Any) -> str:
        path = Text().read(value)
        if not os.path.isfile(path):
            problem = "is a directory" if os.path.isdir(path) else "does not exist"
            raise ValueError(f"{path} {problem}; give a file")
        if not os.access(path, os.R_OK):
            raise ValueError(f"{path} is not readable by this process")
        if self.check is not None:
            self.check(path)
        return path


def certificate_bundle(path: str) -> None:
    """Loads the file as TLS does at start, so a file that holds no certificate is refused
    now rather than failing every https connection later."""
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError):
        raise ValueError(f"{path} holds no PEM certificate; give a CA bundle") from None


@dataclass(frozen=True, slots=True)
class ListOf:
    """One or more items, each read by `item`: a TOML list, a repeated flag, or text split
    at commas and spaces (unless `split` is False: then the whole text is one item)."""

    item: SettingType
    split: bool = True
    parse: Callable[[Any], Any] | None = None  # each read item, checked further
    sort: bool = False  # sorted, each item once

    metavar = ""  # a list's flag spells its own (N[,N…], [MODEL=]URL)

    @property
    def limits(self) -> str:
        return self.item.limits

    def read(self, value: Any) -> tuple[Any, ...]:
        if isinstance(value, str):
            items: list[Any] = [p for p in _SPLIT.split(value) if p] if self.split else [value]
        elif isinstance(value, list | tuple):
            items = list(value)
        elif isinstance(value, dict):
            raise ValueError(f"expected a list, got {shown(value)}")
        else:
            items = [value]
        if not items:
            raise ValueError("expected at least one item, got none")
        read = [self.item.read(item) for item in items]
        if self.parse is not None:
            for item in read:
                self.parse(item)
        return tuple(sorted(set(read))) if self.sort else tuple(read)


def regular_expression(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{shown(pattern)} is not a regular expression ({exc.msg})") from None
