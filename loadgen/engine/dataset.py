"""Prompts from a file: JSON lines of {"prompt"} or {"messages"} (an optional "max_tokens"),
or ShareGPT's JSON list of conversations (the first human turn of each).

Every record's shape is checked as it is read, and a wrong one stops loadgen before any
load with FILE:LINE and what is wrong (`[{"conversations": 5}]` once ended in a TypeError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loadgen.inputs import jsonl
from loadgen.inputs.prompt_text import Prompt

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")
HUMAN = ("human", "user")


class BadRecord(ValueError):
    """A record of a dataset that cannot be a prompt; the message says which and why."""


def load_dataset(path: str | Path) -> list[Prompt]:
    """Every prompt of the file; BadRecord (FILE:LINE: why) for the first bad record."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRecord(f"--dataset {path}: cannot read it as UTF-8 text ({exc})") from None
    try:
        if text.lstrip().startswith("["):
            prompts = [p for line, item in _list_items(text) if (p := _sharegpt(item, line))]
        else:
            prompts = [_jsonl(item, line) for line, item in jsonl.objects(text)]
    except BadRecord as exc:
        raise BadRecord(f"{path}:{exc}") from None
    if not prompts:
        raise BadRecord(f"{path}: no prompts found")
    return prompts


def _past_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    assert match is not None, "white space, or none, is there at any position"
    return match.end()


def _list_items(text: str) -> Iterator[tuple[int, Any]]:
    """The items of a JSON list, each with the line it starts on."""
    pos = _past_space(text, 0) + 1  # past the "["
    line, counted = 1, 0
    while True:
        pos = _past_space(text, pos)
        line, counted = line + text.count("\n", counted, pos), pos
        if text.startswith("]", pos):
            return
        try:
            item, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise BadRecord(f"{exc.lineno}: not JSON ({exc.msg})") from None
        yield line, item
        pos = _past_space(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            line += text.count("\n", counted, pos)
            raise BadRecord(f"{line}: expected ',' or ']' after a conversation")


def _sharegpt(item: Any, line: int) -> Prompt | None:
    """A conversation's first human turn as a prompt; None for one without."""
    if not isinstance(item, dict):
        raise BadRecord(f"{line}: a conversation must be a JSON object, not {jsonl.kind(item)}")
    turns = item.get("conversations")
    if turns is None:
        return None
    if not isinstance(turns, list):
        raise BadRecord(f"{line}: conversations must be a list of turns, not {jsonl.kind(turns)}")
    for turn in turns:
        if not isinstance(turn, dict):
            raise BadRecord(f"{line}: a turn must be a JSON object, not {jsonl.kind(turn)}")
        if turn.get("from") in HUMAN:
            value = turn.get("value")
            if not isinstance(value, str):
                raise BadRecord(f"{line}: a turn's value must be text, not {jsonl.kind(value)}")
            return Prompt(messages=[{"role": "user", "content": value}]) if value else None
    return None


def _jsonl(item: dict[str, Any] | str, line: int) -> Prompt:
    if isinstance(item, str):
        raise BadRecord(f"{line}: {item}")
    max_tokens = item.get("max_tokens", item.get("output_tokens"))
    if fault := jsonl.max_tokens_fault(max_tokens):
        raise BadRecord(f"{line}: {fault}")
    if "messages" in item:
        if fault := jsonl.messages_fault(item["messages"]):
            raise BadRecord(f"{line}: {fault}")
        return Prompt(messages=item["messages"], max_tokens=max_tokens)
    if "prompt" in item:
        if not isinstance(item["prompt"], str):
            raise BadRecord(f"{line}: prompt must be text, not {jsonl.kind(item['prompt'])}")
        return Prompt(text=item["prompt"], max_tokens=max_tokens)
    raise BadRecord(f"{line}: needs a prompt or messages field")
