"""JSON lines, read alike by every part of loadgen that takes them (datasets, eval items,
traces, captures): each non-blank line one object, named by its line number, and a request's
`messages` and `max_tokens` checked the same way, against one limit, wherever a file gives
them. A leaf: it imports nothing of the project, so the simulator and the pure analysis
share it with the engine. A fault says what is wrong, never the value (it may be prompt text).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

MAX_TOKENS = 1_000_000  # past any context window: a longer prompt would only eat memory


def objects(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each non-blank line's number (from 1) and its object, or why it is not one."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            yield number, f"not JSON ({exc.msg})"
            continue
        yield number, item if isinstance(item, dict) else "not a JSON object"


def strict_objects(
    text: str, source: str, error: type[Exception] = ValueError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """`objects`, stopping at the first line that is not one with `error("SOURCE:LINE: why")`."""
    for number, item in objects(text):
        if isinstance(item, str):
            raise error(f"{source}:{number}: {item}")
        yield number, item


def messages_fault(messages: Any) -> str | None:
    """Why `messages` is not a chat conversation (None when it is one)."""
    if not isinstance(messages, list) or not messages:
        return f"messages must be a non-empty list, not {kind(messages)}"
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return "each message must be an object with a role"
        if not isinstance(message.get("content"), str | list):
            return "a message's content must be text or a list of parts"
    return None


def max_tokens_fault(value: Any) -> str | None:
    """Why `value` is not a request's max_tokens (None when it is one, or absent)."""
    if value is None or (type(value) is int and 1 <= value <= MAX_TOKENS):
        return None
    return f"max_tokens must be a whole number from 1 to {MAX_TOKENS}"


def kind(value: Any) -> str:
    """What a JSON value is, as a fault names it (never the value: it may be prompt text)."""
    names = {dict: "an object", list: "a list", str: "text", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
