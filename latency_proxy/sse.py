"""Incremental Server-Sent Events parser: bytes in, events out. Pure, no I/O.

The proxy forwards upstream bytes unchanged, so every event keeps the exact bytes it was
made of (`raw`) and the concatenation of all events' raw bytes is the stream itself; the
meter only needs the joined `data` field. Line endings follow the WHATWG rules (CRLF, LF or
a lone CR); a CR at the very end of a chunk waits for the next chunk, since it may be the
first half of a CRLF.

As bytes arrive only event boundaries (blank lines) are searched for, resuming where the
last search stopped, so the search sees each byte once however the stream is split; an
event's fields are read once it is complete. The usual event, one `data: ` line ended by a
blank line, LF only, is a single slice, and the usual read, one such event, skips the search.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LINE_END = re.compile(rb"\r\n|\r|\n")
_new = tuple.__new__  # Event's own __new__ is Python code: twice the cost per event


class Event(NamedTuple):
    """One block of lines ended by a blank line.

    `data` is None for blocks without a data field (comments, keep-alives, stray blank
    lines): they dispatch nothing in a browser, but their bytes still belong to the stream.
    A named tuple because one is made per event: it costs a fraction of a frozen dataclass.
    """

    raw: bytes
    data: bytes | None
    name: str | None = None


class SSEParser:
    """Feed chunks as they arrive; get back the events they complete."""

    __slots__ = ("_buf", "_line")

    def __init__(self) -> None:
        self._buf = b""  # bytes of the unfinished event
        self._line = 0  # where its first line not known to be complete starts in _buf

    @property
    def pending(self) -> int:
        """Bytes received that belong to no complete event yet."""
        return len(self._buf)

    def remainder(self) -> bytes:
        """The bytes of the unfinished event (a stream that ended mid-event)."""
        return self._buf

    def feed(self, chunk: bytes) -> list[Event]:
        if (
            not self._buf
            and chunk.find(10) == len(chunk) - 2
            and chunk[-1] == 10
            and 13 not in chunk
            and chunk[:6] == b"data: "
        ):
            return [_new(Event, (chunk, chunk[6:-2], None))]  # the usual read: one event
        buf = self._buf + chunk if self._buf else chunk
        # the usual stream is LF-only: bytes.find is much cheaper than the regex
        lf_only = b"\r" not in buf
        ends, line = _ends_lf(buf, self._line) if lf_only else _ends_any(buf, self._line)
        start = ends[-1] if ends else 0
        self._buf = buf[start:] if start else buf
        self._line = line - start
        events = []
        begin = 0
        for end in ends:
            raw = buf[begin:end]
            if lf_only and raw[:6] == b"data: " and raw.find(10, 6) == end - begin - 2:
                events.append(_new(Event, (raw, raw[6:-2], None)))  # the usual event
            else:
                events.append(_event(raw))
            begin = end
        return events


def _ends_lf(buf: bytes, pos: int) -> tuple[list[int], int]:
    """Where each complete event ends, and where the unfinished line starts (LF only).

    pos is a line start; an event ends with the first empty line: an LF at pos, or the
    second of the first two LFs in a row after it.
    """
    ends = []
    while True:
        if buf[pos : pos + 1] == b"\n":
            pos += 1
        else:
            found = buf.find(b"\n\n", pos)
            if found < 0:
                return ends, max(pos, buf.rfind(b"\n", pos) + 1)
            pos = found + 2
        ends.append(pos)


def _ends_any(buf: bytes, pos: int) -> tuple[list[int], int]:
    """_ends_lf for any mix of CRLF, LF and lone CR."""
    ends = []
    while (match := _LINE_END.search(buf, pos)) is not None:
        end = match.end()
        if end == len(buf) and buf[end - 1] == 13:
            break  # maybe half of a CRLF: decide when more bytes arrive
        if match.start() == pos:
            ends.append(end)  # an empty line ends the event
        pos = end
    return ends, pos


def _event(raw: bytes) -> Event:
    """The event made of raw, a complete block (its blank line included)."""
    data: list[bytes] | None = None
    name: str | None = None
    for line in _LINE_END.split(raw):
        if not line or line[0] == 58:  # the blank line(s), and ":" comments
            continue
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            if data is None:
                data = [value]
            else:
                data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return Event(raw, b"\n".join(data) if data is not None else None, name)
