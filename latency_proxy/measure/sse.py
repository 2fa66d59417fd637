"""Incremental Server-Sent Events parser: bytes in, events out. Pure, no I/O.

The proxy forwards upstream bytes unchanged, so every event keeps the exact bytes it was
made of (`raw`) and the concatenation of all events' raw bytes is the stream itself; the
meter only needs the joined `data` field. A byte-order mark that starts the stream is an
event without data of its own, so the first field is read as if it were not there. Line
endings follow the WHATWG rules (CRLF, LF or a lone CR); a CR at the very end of a chunk
waits for the next chunk, since it may be the first half of a CRLF.

As bytes arrive only event boundaries (blank lines) are searched for, resuming where the
last search stopped, so the search sees each byte once however the stream is split; an
event's fields are read once it is complete. The usual event, one `data: ` line ended by a
blank line, LF only, is a single slice, and the usual read, one such event, skips the search.

An event still incomplete past `max_event_bytes` is not held: its bytes so far, and then
every read until its blank line, come out as events without data (`Event(raw, None)`, what
the meter ignores and the relay passes on), so it passes through unmetered, in memory
bounded by the limit, at a cost linear in its size; `oversized` counts such events. A big
event below the limit grows its buffer in place, so that stays linear too.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LINE_END = re.compile(rb"\r\n|\r|\n")
# two line ends in a row: an event's end (a CR followed by LF is one line end, not two)
_BLANK_LINE = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))")
MAX_EVENT_BYTES = 4 * 2**20
BOM = "\ufeff".encode()  # one at the very start of a stream is ignored
_IN_PLACE = 64 * 1024  # a pending event this big grows in place, not by a copy per read
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

    __slots__ = ("_buf", "_cr", "_head", "_line", "_max", "_skipping", "oversized")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf: bytes | bytearray = b""  # the unfinished event (skipping: its last 2 bytes)
        self._line = 0  # where its first line not known to be complete starts in _buf
        self._cr = False  # _buf holds a CR (else the LF-only search will do)
        self._max = max_event_bytes
        self._skipping = False  # inside an event past the limit, passed on unparsed
        self.oversized = 0  # events that were
        self._head: bytes | None = b""  # the stream's first bytes, until a BOM is ruled out

    @property
    def pending(self) -> int:
        """Bytes received that belong to no complete event yet (and were not passed on)."""
        return 0 if self._skipping else len(self._buf) + len(self._head or b"")

    def remainder(self) -> bytes:
        """The bytes of the unfinished event (a stream that ended mid-event)."""
        return b"" if self._skipping else (self._head or b"") + bytes(self._buf)

    def feed(self, chunk: bytes) -> list[Event]:
        if self._head is not None:
            return self._feed_first(chunk)
        if (
            not self._buf  # never while skipping: then it holds the event's last bytes
            and chunk.find(10) == len(chunk) - 2
            and chunk[-1] == 10
            and 13 not in chunk
            and chunk[:6] == b"data: "
        ):
            return [_new(Event, (chunk, chunk[6:-2], None))]  # the usual read: one event
        if self._skipping:
            return self._skip(chunk)
        held = len(self._buf)
        if not held:
            buf: bytes | bytearray = chunk
        elif held >= _IN_PLACE:
            if type(self._buf) is bytes:
                self._buf = bytearray(self._buf)
            self._buf += chunk
            buf = self._buf
        else:
            buf = self._buf + chunk
        # the usual stream is LF-only: bytes.find is much cheaper than the regex
        cr = self._cr or 13 in chunk
        scan = held - 1  # what was held was searched: an end can only begin at its last byte
        ends, line = _ends_any(buf, self._line, scan) if cr else _ends_lf(buf, self._line, scan)
        events: list[Event] = []
        if ends:
            whole = bytes(buf) if isinstance(buf, bytearray) else buf
            start = ends[-1]
            self._buf = whole[start:]
            self._cr = cr and 13 in self._buf
            begin = 0
            for end in ends:
                raw = whole[begin:end]
                if not cr and raw[:6] == b"data: " and raw.find(10, 6) == end - begin - 2:
                    events.append(_new(Event, (raw, raw[6:-2], None)))  # the usual event
                else:
                    events.append(_event(raw))
                begin = end
        else:
            start = 0
            self._buf = buf
            self._cr = cr
        self._line = line - start
        if len(self._buf) > self._max:
            events.append(self._start_skipping())
        return events

    def _feed_first(self, chunk: bytes) -> list[Event]:
        """The stream's first bytes: one leading U+FEFF is no part of the first field's name
        (WHATWG event-stream), so it comes out as an event of its own, without data."""
        head = (self._head or b"") + chunk
        if len(head) < len(BOM) and BOM.startswith(head):
            self._head = head  # maybe a BOM split across reads
            return []
        self._head = None
        if not head.startswith(BOM):
            return self.feed(head)
        rest = head[len(BOM) :]
        return [_new(Event, (BOM, None, None)), *(self.feed(rest) if rest else ())]

    def _start_skipping(self) -> Event:
        """The event in progress is past the limit: pass on what came of it, keep its tail."""
        self.oversized += 1
        self._skipping = True
        raw = bytes(self._buf)
        self._buf = raw[-2:]
        self._line = 0
        self._cr = False
        return _new(Event, (raw, None, None))

    def _skip(self, chunk: bytes) -> list[Event]:
        """Pass a read of an oversized event on, up to its blank line; parse what follows."""
        tail = self._buf
        across = _BLANK_LINE.search(tail + chunk[:4])  # a blank line begun before this read
        if across is not None and across.start() < len(tail):
            end = across.end() - len(tail)
        elif 10 in chunk or 13 in chunk:
            found = _BLANK_LINE.search(chunk)
            end = found.end() if found is not None else -1
        else:
            end = -1  # no line end at all: the usual read of a big event
        if end < 0:
            self._buf = (tail + chunk[-2:])[-2:]
            return [_new(Event, (chunk, None, None))]
        self._skipping = False
        self._buf = b""
        events = [_new(Event, (chunk[:end], None, None))] if end > 0 else []
        return events + self.feed(chunk[end:]) if end < len(chunk) else events


def _ends_lf(buf: bytes | bytearray, pos: int, scan: int) -> tuple[list[int], int]:
    """Where each complete event ends, and where the unfinished line starts (LF only).

    pos is a line start; an event ends with the first empty line: an LF at pos, or the
    second of the first two LFs in a row after it. Nothing before scan needs searching.
    """
    ends: list[int] = []
    while True:
        if buf[pos : pos + 1] == b"\n":
            pos += 1
        else:
            found = buf.find(b"\n\n", max(pos, scan))
            if found < 0:
                return ends, max(pos, buf.rfind(b"\n", max(pos, scan)) + 1)
            pos = found + 2
        ends.append(pos)


def _ends_any(buf: bytes | bytearray, pos: int, scan: int) -> tuple[list[int], int]:
    """_ends_lf for any mix of CRLF, LF and lone CR."""
    ends = []
    at = max(pos, scan)
    while (match := _LINE_END.search(buf, at)) is not None:
        end = match.end()
        if end == len(buf) and buf[end - 1] == 13:
            break  # maybe half of a CRLF: decide when more bytes arrive
        if match.start() == pos:
            ends.append(end)  # an empty line ends the event
        pos = at = end
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
