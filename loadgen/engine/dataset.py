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

from loadgen.engine.bounds import MAX_TOKENS
from loadgen.engine.workload import Prompt

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
            prompts = [_jsonl(item, line) for line, item in _lines(text)]
    except BadRecord as exc:
        raise BadRecord(f"{path}:{exc}") from None
    if not prompts:
        raise BadRecord(f"{path}: no prompts found")
    return prompts


def _lines(text: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadRecord(f"{number}: not JSON ({exc.msg})") from None


def _list_items(text: str) -> Iterator[tuple[int, Any]]:
    """The items of a JSON list, each with the line it starts on."""
    pos = _SPACE.match(text).end() + 1  # past the "["
    line, counted = 1, 0
    while True:
        pos = _SPACE.match(text, pos).end()
        line, counted = line + text.count("\n", counted, pos), pos
        if text.startswith("]", pos):
            return
        try:
            item, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise BadRecord(f"{exc.lineno}: not JSON ({exc.msg})") from None
        yield line, item
        pos = _SPACE.match(text, pos).end()
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            line += text.count("\n", counted, pos)
            raise BadRecord(f"{line}: expected ',' or ']' after a conversation")


def _sharegpt(item: Any, line: int) -> Prompt | None:
    """A conversation's first human turn as a prompt; None for one without."""
    if not isinstance(item, dict):
        raise BadRecord(f"{line}: a conversation must be a JSON object, not {_kind(item)}")
    turns = item.get("conversations")
    if turns is None:
        return None
    if not isinstance(turns, list):
        raise BadRecord(f"{line}: conversations must be a list of turns, not {_kind(turns)}")
    for turn in turns:
        if not isinstance(turn, dict):
            raise BadRecord(f"{line}: a turn must be a JSON object, not {_kind(turn)}")
        if turn.get("from") in HUMAN:
            value = turn.get("value")
            if not isinstance(value, str):
                raise BadRecord(f"{line}: a turn's value must be text, not {_kind(value)}")
            return Prompt(messages=[{"role": "user", "content": value}]) if value else None
    return None


def _jsonl(item: Any, line: int) -> Prompt:
    if not isinstance(item, dict):
        raise BadRecord(f"{line}: a record must be a JSON object, not {_kind(item)}")
    max_tokens = _max_tokens(item.get("max_tokens", item.get("output_tokens")), line)
    if "messages" in item:
        return Prompt(messages=_messages(item["messages"], line), max_tokens=max_tokens)
    if "prompt" in item:
        if not isinstance(item["prompt"], str):
            raise BadRecord(f"{line}: prompt must be text, not {_kind(item['prompt'])}")
        return Prompt(text=item["prompt"], max_tokens=max_tokens)
    raise BadRecord(f"{line}: needs a prompt or messages field")


def _messages(messages: Any, line: int) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRecord(f"{line}: messages must be a non-empty list, not {_kind(messages)}")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRecord(f"{line}: each message must be an object with a role")
        if not isinstance(message.get("content"), str | list):
            raise BadRecord(f"{line}: a message's content must be text or a list of parts")
    return messages


def _max_tokens(value: Any, line: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_TOKENS:
        raise BadRecord(f"{line}: max_tokens must be a whole number from 1 to {MAX_TOKENS}")
    return value


def _kind(value: Any) -> str:
    """What a JSON value is, as the message names it (never the value: it may be prompt text)."""
    names = {dict: "an object", list: "a list", str: "text", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
