"""Writes finished requests' telemetry off the request path.

Streams served by one engine end together (a batch finishes in the same decode step), and
recording a request (two spans, its histogram observations, a log line) costs a few hundred
microseconds. Done inline, 64 such records form one burst that every newly arrived request
waits behind; queued here and written one per event-loop turn, a new request waits for one
record at most. Nothing is lost: shutdown drains the queue before telemetry is flushed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

MAX_PENDING = 256  # covers a large batch of streams ending together
Record = TypeVar("Record")  # the proxy's: record.exchange.Exchange


class WriteQueue(Generic[Record]):
    def __init__(self, write: Callable[[Record, float], None]) -> None:
        self._write = write  # request_writer.RequestWriter.finish in the proxy
        self._pending: deque[tuple[Record, float]] = deque()
        self._next: asyncio.Handle | None = None  # the next loop turn's write

    def submit(self, exchange: Record, t_end: float) -> None:
        """Queue a finished exchange; t_end (its last byte) is already fixed.

        The queue is bounded: when requests end faster than one per loop turn for long, the
        oldest record is written inline, so memory stays flat under any load."""
        if len(self._pending) >= MAX_PENDING:
            oldest, oldest_end = self._pending.popleft()
            self._write(oldest, oldest_end)
        self._pending.append((exchange, t_end))
        if self._next is None:
            self._next = asyncio.get_running_loop().call_soon(self._write_one)

    def _write_one(self) -> None:
        """One record, and the next one on the next loop turn (a callback, not a task: no
        task to create and step for every record)."""
        self._next = None
        if not self._pending:
            return  # flushed meanwhile
        exchange, t_end = self._pending.popleft()
        try:
            self._write(exchange, t_end)
        finally:
            if self._pending:
                self._next = asyncio.get_running_loop().call_soon(self._write_one)

    def flush(self) -> None:
        """Write everything still queued (at shutdown, before exporters flush)."""
        while self._pending:
            exchange, t_end = self._pending.popleft()
            self._write(exchange, t_end)
