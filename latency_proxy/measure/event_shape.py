"""The bytes a stream's content events share, so most of them need no full JSON parse. Pure.

A model server writes every content chunk of a stream from one template; from chunk to chunk
only the generated text changes, and with continuous usage the usage object:

    {"id":"c1",...,"choices":[{"index":0,"delta":{"content":"<text>"},...}],"usage":<usage>}

A Shape is one such event cut at those two values: `head` up to and with the text's opening
quote, `middle` from its closing quote up to the usage value, `tail` the rest (`middle` is
None when the usage, if any, is fixed bytes of the template; then `tail` starts at the
closing quote). An event that starts with head and ends with tail, whose text piece parses
as one JSON string and whose usage piece as one JSON value, is valid JSON and parses to the
template's payload with those two values replaced: every other byte — keys, their order,
duplicates, nesting, whitespace — is the template's. Whether the cut is the payload's text
and top-level usage the meter checks once, when it learns a shape, by parsing a probe
(StreamMeter): an event that does not fit a verified shape gets the full parse.
"""

from __future__ import annotations

from typing import Any

import orjson

_TEXT_KEYS = (b'"content":"', b'"text":"', b'"reasoning_content":"', b'"reasoning":"')
_USAGE_KEY = b'"usage":{'


class Shape:
    __slots__ = ("head", "middle", "tail")

    def __init__(self, head: bytes, middle: bytes | None, tail: bytes) -> None:
        self.head = head
        self.middle = middle
        self.tail = tail

    def fill(self, text: bytes, usage: bytes) -> bytes:
        """An event of this shape: text is a JSON string's body, usage a JSON value."""
        if self.middle is None:
            return self.head + text + self.tail
        return self.head + text + self.middle + usage + self.tail

    def cut(self, data: bytes) -> tuple[str, Any] | None:
        """(text, parsed usage value) of an event of this shape; None if it is not one.

        The usage is None when the template holds it (the caller knows it then).
        """
        head, tail = self.head, self.tail
        if not data.startswith(head) or not data.endswith(tail):
            return None
        opening = len(head) - 1
        stop = len(data) - len(tail)  # where the tail starts
        try:
            if self.middle is None:
                if stop <= len(head):
                    return None  # an empty text, or head and tail overlap
                return orjson.loads(data[opening : stop + 1]), None
            closing = data.find(self.middle, len(head))
            value = closing + len(self.middle)
            if closing <= len(head) or value > stop:
                return None
            return orjson.loads(data[opening : closing + 1]), orjson.loads(data[value:stop])
        except orjson.JSONDecodeError:
            return None


def find(data: bytes, usage_hole: bool) -> Shape | None:
    """A candidate shape cut from one event's bytes (unverified), or None.

    The text is the first string value under a content key; the usage hole, when asked for,
    the last `"usage":{...}` object after it.
    """
    for key in _TEXT_KEYS:
        at = data.find(key)
        if at >= 0:
            opening = at + len(key) - 1
            break
    else:
        return None
    closing = _string_end(data, opening + 1)
    if closing is None:
        return None
    head = data[: opening + 1]
    if not usage_hole:
        return Shape(head, None, data[closing:])
    at = data.rfind(_USAGE_KEY, closing)
    if at < 0:
        return None
    value = at + len(_USAGE_KEY) - 1
    end = _object_end(data, value)
    if end is None:
        return None
    return Shape(head, data[closing:value], data[end:])


def _string_end(data: bytes, pos: int) -> int | None:
    """Index of the quote that ends the JSON string whose first character is at pos."""
    while (quote := data.find(b'"', pos)) >= 0:
        backslashes = 0
        while data[quote - 1 - backslashes] == 92:
            backslashes += 1
        if backslashes % 2 == 0:
            return quote
        pos = quote + 1
    return None


def _object_end(data: bytes, pos: int) -> int | None:
    """Index after the object that starts at pos: the first `}` that closes valid JSON."""
    end = pos
    while (end := data.find(b"}", end) + 1) > 0:
        try:
            orjson.loads(data[pos:end])
        except orjson.JSONDecodeError:
            continue
        return end
    return None
