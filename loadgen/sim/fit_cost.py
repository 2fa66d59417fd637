"""What a fit costs: bounded before it starts, shown while it runs.

A fit reads its capture whole and replays it some tens of times (fit.py: each candidate set
of terms is one replay), so its time and memory grow with the capture. Three bounds:

- before reading: each source is a regular file (or a run directory's requests.jsonl), the
  sources together at most MAX_CAPTURE_BYTES, no line longer than MAX_LINE_BYTES (a
  capture's line is a few hundred bytes; /dev/zero is no capture) but a file's only one (a
  JSON document written on one line, as other tools write theirs);
- after the first replay (the base preset's, timed): the fit's time, estimated as
  REPLAYS_PER_FIT such replays, past --time-budget stops the fit there, saying so;
- while it runs: a line on stderr every PROGRESS_S, so a long fit is seen to move.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from latency_proxy.base.units import parse_duration

MAX_CAPTURE_BYTES = 128 << 20  # ~300,000 proxy log lines: a fit needs thousands of requests
MAX_LINE_BYTES = 64 << 10
REPLAYS_PER_FIT = 40  # measured: a fit's time over its first replay's, 20-40 on our captures
PROGRESS_S = 10.0
DEFAULT_BUDGET = "10m"


class TooCostly(ValueError):
    """The fit would run past its budget; the message says by how much and what to do."""


def check_sources(sources: Sequence[str]) -> None:
    """ValueError naming the source when the capture is no file, too large or has a line no
    capture has, before any of it is parsed."""
    total = 0
    for source in sources:
        path = Path(source)
        file = path / "requests.jsonl" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"{file}: not a regular file (a capture is the proxy's log or a run)")
        total += file.stat().st_size
        if total > MAX_CAPTURE_BYTES:
            raise ValueError(
                f"{file}: the capture passes {MAX_CAPTURE_BYTES >> 20} MB; a fit needs thousands "
                "of requests, not millions: give a window of it (a few hours of traffic)"
            )
        with file.open("rb") as lines:
            wide, written = None, 0
            for number, line in enumerate(lines, 1):
                written += bool(line.strip())
                if wide is None and len(line) > MAX_LINE_BYTES:
                    wide = (number, len(line))
            # one long line alone is a JSON document written compactly (another tool's file)
            if wide is not None and written > 1:
                raise ValueError(
                    f"{file}:{wide[0]}: a line of {wide[1]:,} bytes; a capture's lines "
                    f"are at most {MAX_LINE_BYTES >> 10} KB"
                )


def budget_s(text: str) -> float:
    """--time-budget's seconds; ValueError for what is no positive duration."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"--time-budget {text}: {exc}") from None
    if not seconds > 0:
        raise ValueError(f"--time-budget {text}: give a duration above 0")
    return seconds


class Meter:
    """Told after each replay: estimates the fit's time at the first, refuses it past the
    budget (TooCostly), and says how far it is every PROGRESS_S."""

    def __init__(
        self,
        requests: int,
        budget: float,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests = requests
        self.budget = budget
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.clock = clock
        self.start = clock()
        self.said = self.start
        self.replays = 0

    def __call__(self) -> None:
        self.replays += 1
        now = self.clock()
        elapsed = now - self.start
        if self.replays == 1:
            estimate = elapsed * REPLAYS_PER_FIT
            spent = f"one replay of its {self.requests:,} requests took {elapsed:.1f} s"
            if estimate > self.budget:
                raise TooCostly(
                    f"the fit would take ~{_said(estimate)} ({spent}, a fit takes ~"
                    f"{REPLAYS_PER_FIT} replays), past --time-budget {_said(self.budget)}: fit a "
                    "shorter window of the capture, or raise --time-budget"
                )
            if estimate >= PROGRESS_S:
                self.say(f"fit: {spent}; the fit takes ~{_said(estimate)}")
                self.said = now
        elif now - self.said >= PROGRESS_S:
            self.say(f"fit: {self.replays} replays, {_said(elapsed)} so far")
            self.said = now


def _said(seconds: float) -> str:
    """A duration as people read it: 45 s, 12 min, 3.5 h."""
    if seconds < 120:
        return f"{max(1, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
