"""A trace's rows: the record every format reads into, the bad row, and the checks every
reader makes of a number, a time and a gap (and the tokens of a text no tokenizer counted).
Pure, no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.inputs import jsonl
from loadgen.inputs.bounds import MAX_TOKENS


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace. `at` is seconds on the trace's own clock (epoch or relative).

    `prefix` names the parts of the prompt, in order: a part named before (by an earlier
    record) is the same text again. `prefix_unit` says what a part is: "block" (a fixed
    number of tokens, the last one the rest), "message" (a chat message of any length) or
    "chars" (a fixed number of characters of `prompt_chars`, the proxy's prefix blocks).

    An agent's call (the proxy's capture) names itself (`call`), its session, and the call
    whose answer it continues (`parent`), `gap_s` after that answer ended.
    """

    line: int  # 1-based line in the file: replay_index in requests.jsonl
    at: float
    input_tokens: int
    output_tokens: int
    model: str | None = None
    prefix: tuple[str, ...] = ()
    prefix_unit: str = "block"
    prompt_chars: int | None = None  # the text "chars" blocks cut
    call: str | None = None
    session: str | None = None
    parent: str | None = None
    gap_s: float | None = None
    turn: int | None = None
    tools_answered: int = 0


DAY_S = 86_400.0
CHARS_PER_TOKEN = 4  # English text, as the proxy's 1,024-character prefix blocks assume
MAX_TIME_S = 1e10  # seconds since 1970 (or since a trace's start): 2286, past any trace


class BadRow(ValueError):
    """A line that does not make a record; `line` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


Row = TraceRecord | BadRow | None  # None: a request with nothing to replay


def count(value: object, line: int, name: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise BadRow(line, f"{name} is not a whole number: {str(value)[:40]!r}") from None
    if type(value) is not int or not 1 <= value <= MAX_TOKENS:
        raise BadRow(
            line, f"{name} must be a whole number from 1 to {MAX_TOKENS}, not {str(value)[:40]!r}"
        )
    return value


def text_tokens(chars: int) -> int:
    """The tokens of `chars` characters of text no tokenizer counted: at least one."""
    return max(1, chars // CHARS_PER_TOKEN)


def json_rows(text: str, rows: Callable[[int, dict[str, Any]], Iterator[Row]]) -> Iterator[Row]:
    """A JSON-lines format's rows: `rows` of each object (none for a line it passes over); a
    line that is no object, or one that `rows` raises BadRow for, is that bad row."""
    for number, item in jsonl.objects(text):
        if isinstance(item, str):
            yield BadRow(number, item)
            continue
        try:
            yield from rows(number, item)
        except BadRow as exc:
            yield exc


def seconds(value: object, line: int, name: str, scale: float = 1.0) -> float:
    """Seconds (`value` × `scale`): finite, not negative, before MAX_TIME_S."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRow(line, f"{name} is not a number: {str(value)[:40]!r}")
    out = float(value) * scale
    if not math.isfinite(out):
        raise BadRow(line, f"{name} is not finite: {value}")
    if out < 0:
        raise BadRow(line, f"{name} is negative: {value}")
    if out > MAX_TIME_S:
        raise BadRow(line, f"{name} {value:g} is past any trace's time (year 2286)")
    return out


def gap(value: object, line: int, name: str, scale: float = 1.0) -> float:
    """A think or tool time: seconds, finite, from 0 to a day (a longer one is no gap a
    replay waits for)."""
    out = seconds(value, line, name, scale)
    if out > DAY_S:
        raise BadRow(line, f"{name} {value:g} is more than a day")
    return out
