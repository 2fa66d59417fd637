"""A request as captured, and a stream of them on one clock. Pure.

A stream is what one file says of one load: its requests with their arrivals on the
stream's clock. Arrivals on a wall clock (epoch seconds) can be set against another file's;
a monotonic clock (a process's perf counter) is the stream's own, so two such streams are
never one load.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PER_REQUEST = "per request"
REBUILT = "rebuilt from settings"


class CaptureError(ValueError):
    """Input a fit cannot use; the message names the file (and line)."""


@dataclass(frozen=True, slots=True)
class Captured:
    """One request as captured. Times in seconds; arrival on its stream's clock."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    ttft: float | None = None
    tpot: float | None = None
    server_queue: float | None = None
    server_prefill: float | None = None
    server_decode: float | None = None
    measured: bool = True  # False: it loaded the server but is not a target (warmup)
    source: int = 0  # which of the fit's SOURCEs it came from
    rebuilt: bool = False  # its arrival is rebuilt, not measured: fitted by percentiles


@dataclass(slots=True)
class Stream:
    """One load's requests (each with its model, where the file names it), on one clock."""

    rows: list[tuple[Captured, str | None]] = field(default_factory=list)
    failed: int = 0  # requests that did not complete
    empty: int = 0  # completed, with no tokens counted: nothing to time a token by
    wall_clock: bool = True  # arrivals are epoch seconds
    fitted: str = PER_REQUEST  # or REBUILT
    settings: dict[str, object] = field(default_factory=dict)  # what a rebuild used
