"""The live progress line: requests done, errors, running TTFT P50/P99 of the latest window."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from typing import TextIO

import numpy as np

from loadgen.analysis.records import Record

WINDOW = 1000


class Progress:
    """Fed every record; redraws one status line on a terminal twice a second."""

    def __init__(self, stream: TextIO = sys.stderr, label: str = "") -> None:
        self.stream = stream
        self.label = label
        self.ok = 0
        self.failed = 0
        self.ttft: deque[float] = deque(maxlen=WINDOW)
        self.started = time.perf_counter()

    def __call__(self, record: Record) -> None:
        if record.ok:
            self.ok += 1
            if record.ttft_s is not None:
                self.ttft.append(record.ttft_s)
        else:
            self.failed += 1

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        text = f"{self.label} {elapsed:5.0f}s  {self.ok} ok  {self.failed} errors"
        if self.ttft:
            p50, p99 = np.quantile(np.fromiter(self.ttft, float), [0.5, 0.99])
            text += f"  TTFT P50 {p50 * 1e3:.0f} ms  P99 {p99 * 1e3:.0f} ms"
        return text

    async def draw(self, interval_s: float = 0.5) -> None:
        """Redraw until cancelled; then end the line."""
        try:
            while True:
                self.stream.write("\r\x1b[2K" + self.line())
                self.stream.flush()
                await asyncio.sleep(interval_s)
        finally:
            self.stream.write("\r\x1b[2K" + self.line() + "\n")
            self.stream.flush()
