"""Eval items: read from a JSON-lines file or generated (the built-in canaries), and scored.
Pure, no I/O beyond reading the file.

A line is an object with `messages` (a chat conversation) or `prompt` (text), `answer`, and
optionally `match` (how an output is checked against the answer, below), `max_tokens` and
`id`. Other keys are ignored, so a benchmark's own fields can stay. Any error names the file
and line and never quotes an item's text (it is content).

Matches, all on the output with surrounding whitespace removed:
- exact: the output equals the answer (runs of whitespace count as one space);
- contains: the answer appears in the output, ignoring case;
- regex: the answer is a regular expression found somewhere in the output; the search is
  cut off after REGEX_TIMEOUT_S (a pattern that backtracks, like (a|aa)+$, could otherwise run
  for hours and hold the process past SIGTERM), and the answer is then not judged (None);
- number: the last number in the output equals the answer (GSM8K's "#### 42": commas in
  numbers are ignored, 42 equals 42.0);
- choice: the letter the output picks (MMLU's A-J: "The answer is (B)", "B)", a bare "B")
  equals the answer, ignoring case.

The canaries are cheap checks that a deployment still computes and copies, generated from a
seed: `builtin:arithmetic` (sums and products of multi-digit numbers, exact answers) and
`builtin:copy` (a random string to repeat exactly).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import regex

from loadgen.inputs import jsonl

MATCHES = ("exact", "contains", "regex", "number", "choice")
BUILTINS = ("arithmetic", "copy")
REGEX_TIMEOUT_S = 0.1  # far past any sane pattern on an answer; short enough not to stall the load
BUILTIN_ITEMS = 200  # per canary: enough for a ±7-point interval at worst, cheap to send
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_CHOICE = (
    re.compile(r"answer\s*(?:is|:)?\s*\(?([A-J])\b", re.IGNORECASE),
    re.compile(r"\(([A-J])\)"),
    re.compile(r"^\s*([A-J])\s*[).:]?\s*$", re.MULTILINE),
    re.compile(r"\b([A-J])\b"),
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class EvalItem:
    id: str
    answer: str
    match: str = "exact"
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None

    def correct(self, output: str) -> bool | None:
        """Whether `output` answers this item, by its match rule (module docstring); None
        when it could not be told in time (a regex cut off)."""
        return score(self.match, self.answer, output)


def load(spec: str, seed: int = 0) -> list[EvalItem]:
    """The items of `--eval SPEC`: a JSON-lines file, or builtin:NAME generated from `seed`."""
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in BUILTINS:
            raise ValueError(f"--eval {spec}: unknown built-in; known: {', '.join(BUILTINS)}")
        return canaries(name, seed)
    try:
        text = Path(spec).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--eval {spec}: cannot read it ({exc.__class__.__name__})") from None
    items = [_item(data, f"{spec}:{number}") for number, data in jsonl.strict_objects(text, spec)]
    if not items:
        raise ValueError(f"{spec}: no items")
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{spec}: the id {_first_repeat(ids)!r} is used twice")
    return items


def _item(data: dict[str, Any], where: str) -> EvalItem:
    """One item from one line's object; `where` (FILE:LINE) names it in errors and is its
    default id."""
    messages, prompt = data.get("messages"), data.get("prompt")
    if (messages is None) == (prompt is None):
        raise ValueError(f"{where}: needs exactly one of messages and prompt")
    if messages is not None and (fault := jsonl.messages_fault(messages)):
        raise ValueError(f"{where}: {fault}")
    if prompt is not None and not (isinstance(prompt, str) and prompt.strip()):
        raise ValueError(f"{where}: prompt must be a non-empty string")
    answer = data.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float) or answer == "":
        raise ValueError(f"{where}: needs an answer (a non-empty string or a number)")
    match = data.get("match", "exact")
    if match not in MATCHES:
        raise ValueError(f"{where}: unknown match; known: {', '.join(MATCHES)}")
    answer = str(answer)
    if match == "regex":
        try:
            regex.compile(answer)
        except regex.error as exc:
            raise ValueError(f"{where}: the answer's regex does not compile ({exc})") from None
    if match == "number" and _decimal(answer) is None:
        raise ValueError(f"{where}: match number needs a number as the answer")
    max_tokens = data.get("max_tokens")
    if fault := jsonl.max_tokens_fault(max_tokens):
        raise ValueError(f"{where}: {fault}")
    item_id = data.get("id", where)
    return EvalItem(str(item_id), answer, match, prompt, messages, max_tokens)


def score(match: str, answer: str, output: str) -> bool | None:
    output = output.strip()
    if match == "exact":
        return _SPACE.sub(" ", output) == _SPACE.sub(" ", answer.strip())
    if match == "contains":
        return answer.strip().casefold() in output.casefold()
    if match == "regex":
        try:
            return regex.search(answer, output, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            return None
    if match == "number":
        numbers = _NUMBER.findall(output)
        return bool(numbers) and _decimal(numbers[-1]) == _decimal(answer)
    picked = next((m.group(1) for p in _CHOICE if (m := p.search(output))), None)
    return picked is not None and picked.upper() == answer.strip().upper()


def canaries(name: str, seed: int, count: int = BUILTIN_ITEMS) -> list[EvalItem]:
    """A built-in canary's items, the same for the same seed."""
    rng = random.Random(f"{name}:{seed}")
    return [_GENERATORS[name](rng, f"{name}-{i}") for i in range(count)]


def _arithmetic(rng: random.Random, item_id: str) -> EvalItem:
    a, b = rng.randrange(100, 1_000_000), rng.randrange(100, 100_000)
    if rng.random() < 0.5:
        question, result = f"{a} + {b}", a + b
    else:
        question, result = f"{a} * {b}", a * b
    prompt = f"Compute {question}. Reply with the number only."
    return EvalItem(item_id, str(result), "number", messages=_user(prompt), max_tokens=24)


def _copy(rng: random.Random, item_id: str) -> EvalItem:
    text = "".join(rng.choices(string.ascii_letters + string.digits, k=24))
    prompt = f"Repeat this string exactly, with nothing else: {text}"
    return EvalItem(item_id, text, "contains", messages=_user(prompt), max_tokens=48)


_GENERATORS = {"arithmetic": _arithmetic, "copy": _copy}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _first_repeat(ids: list[str]) -> str:
    seen: set[str] = set()
    for item_id in ids:
        if item_id in seen:
            return item_id
        seen.add(item_id)
    return ""
