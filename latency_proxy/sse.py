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
        if b"\r" in buf:
            return self._feed_any(buf)
        # fast path for the usual LF-only stream: str.find, no regex
        events: list[Event] = []
        start = 0
        pos = self._line
        find = buf.find
        while True:
            end = find(b"\n", pos)
            if end < 0:
                break
            line_start = pos
            pos = end + 1
            if end > line_start:
                self._field(buf[line_start:end])
                continue
            events.append(self._dispatch(buf[start:pos]))
            start = pos
        self._buf = buf[start:]
        self._line = pos - start
        return events

    def _feed_any(self, buf: bytes) -> list[Event]:
        events: list[Event] = []
        start = 0
        pos = self._line
        size = len(buf)
        search = _LINE_END.search
        while True:
            match = search(buf, pos)
            if match is None:
                break
            end = match.end()
            if end == size and buf[end - 1] == 13:
                break  # maybe half of a CRLF: decide when more bytes arrive
            line_start = pos
            pos = end
            if match.start() > line_start:
                self._field(buf[line_start : match.start()])
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
