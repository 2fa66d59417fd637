"""Incremental Server-Sent Events parser: bytes in, events out. Pure, no I/O.

The proxy forwards upstream bytes unchanged, so every event keeps the exact bytes it was
made of (`raw`) and the concatenation of all events' raw bytes is the stream itself; the
meter only needs the joined `data` field. Line endings follow the WHATWG rules (CRLF, LF or
a lone CR); a CR at the very end of a chunk waits for the next chunk, since it may be the
first half of a CRLF. Each byte is scanned once, however the stream is split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")


def _find_lf(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(end of the line's text, start of the next line), or None if no full line yet."""
    end = buf.find(b"\n", pos)
    return None if end < 0 else (end, end + 1)


def _search_any(buf: bytes, pos: int) -> tuple[int, int] | None:
    match = _LINE_END.search(buf, pos)
    if match is None:
        return None
    end = match.end()
    if end == len(buf) and buf[end - 1] == 13:
        return None  # maybe half of a CRLF: decide when more bytes arrive
    return match.start(), end


@dataclass(slots=True, frozen=True)
class Event:
    """One block of lines ended by a blank line.

    `data` is None for blocks without a data field (comments, keep-alives, stray blank
    lines): they dispatch nothing in a browser, but their bytes still belong to the stream.
    """

    raw: bytes
    data: bytes | None
    name: str | None = None


class SSEParser:
    """Feed chunks as they arrive; get back the events they complete."""

    __slots__ = ("_buf", "_data", "_line", "_name")

    def __init__(self) -> None:
        self._buf = b""  # bytes of the unfinished event
        self._line = 0  # where its unfinished line starts in _buf
        self._data: list[bytes] | None = None
        self._name: str | None = None

    @property
    def pending(self) -> int:
        """Bytes received that belong to no complete event yet."""
        return len(self._buf)

    def remainder(self) -> bytes:
        """The bytes of the unfinished event (a stream that ended mid-event)."""
        return self._buf

    def feed(self, chunk: bytes) -> list[Event]:
        buf = self._buf + chunk if self._buf else chunk
        # the usual stream is LF-only: bytes.find is much cheaper than the regex
        line_end = _find_lf if b"\r" not in buf else _search_any
        events: list[Event] = []
        start = 0
        pos = self._line
        while (found := line_end(buf, pos)) is not None:
            line_start = pos
            text_end, pos = found
            if text_end > line_start:
                self._field(buf[line_start:text_end])
                continue
            events.append(self._dispatch(buf[start:pos]))
            start = pos
        self._buf = buf[start:]
        self._line = pos - start
        return events

    def _dispatch(self, raw: bytes) -> Event:
        data = self._data
        event = Event(raw, b"\n".join(data) if data is not None else None, self._name)
        self._data = None
        self._name = None
        return event

    def _field(self, line: bytes) -> None:
        if line[0] == 58:  # ":" starts a comment
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            if self._data is None:
                self._data = [value]
            else:
                self._data.append(value)
        elif name == b"event":
            self._name = value.decode("utf-8", "replace")
