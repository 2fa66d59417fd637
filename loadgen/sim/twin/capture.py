"""A capture of a deployment's traffic, as a fit reads it: the SOURCEs given (the proxy's log,
loadgen runs, other tools' files: sources/), their streams laid on one timeline. Pure but
for reading the files.

Each stream keeps its own clock: streams are one load only when their arrivals are on the
wall clock and overlap (two proxies' logs of one deployment, say). Loads that did not
overlap, and any stream timed on a process's own clock, are laid one after another with an
idle gap the engine drains in, so that no load is replayed on top of another. Failed
requests are counted, not replayed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import orjson

from loadgen.sim.twin.sources import detect
from loadgen.sim.twin.sources.fields import MAX_SECONDS
from loadgen.sim.twin.sources.ours import ACCESS_LOGGER
from loadgen.sim.twin.sources.stream import REBUILT, Captured, CaptureError, Stream

if TYPE_CHECKING:
    from loadgen.sim.twin.deployment import Request, Timing

__all__ = ["ACCESS_LOGGER", "MAX_SECONDS", "Capture", "CaptureError", "Captured", "Source", "read"]

MIN_REQUESTS = 50  # with timings: fewer cannot bound a P90, nor tell the terms apart
# the idle gap after a load: this many times its longest measured tail past its last arrival,
# and at least this (s), so that a candidate up to about that much slower still drains in it
# (idle time costs a virtual clock nothing; only the time slices stretch with it)
DRAIN_FACTOR = 4.0
DRAIN_MIN = 10.0


def log_line(
    request: Request, timing: Timing, *, model: str, epoch: float, **fields: object
) -> bytes:
    """The proxy's log line for a request the twin served (docs/reference/log-line.md): a
    capture made on the virtual clock, for trying a fit; `fields` override keys. No prompt
    text: the proxy never logs it."""
    line = {
        "level": "info",
        "logger": ACCESS_LOGGER,
        "msg": "request",
        "arrived_at": round(epoch + request.arrival, 6),
        "model": model,
        "operation": "chat",
        "stream": True,
        "status": 200,
        "outcome": "ok",
        "input_tokens": request.prompt_tokens,
        "output_tokens": request.output_tokens,
        "cached_tokens": timing.cached_tokens,
        "ttft_s": round(timing.ttft, 6),
        "tpot_s": None if timing.tpot is None else round(timing.tpot, 6),
    }
    return orjson.dumps(line | fields)


@dataclass(frozen=True, slots=True)
class Source:
    """One SOURCE as read: its format and how it is fitted."""

    path: str
    format: str
    fitted: str  # "per request" or "rebuilt from settings"
    streams: int
    requests: int
    failed: int
    settings: list[dict[str, object]]  # what each rebuilt stream was rebuilt from


@dataclass(frozen=True, slots=True)
class Capture:
    requests: list[Captured]  # in arrival order, arrivals from 0
    model: str | None
    failed: int  # requests that did not complete (not replayed)
    sources: list[Source]


def read(paths: list[str], model: str | None = None) -> Capture:
    """Every source's requests on one timeline; CaptureError for input a fit cannot use."""
    streams: list[tuple[int, Stream]] = []
    sources = []
    for index, path in enumerate(paths):
        label, found = detect.read(path)
        rows = sum(len(s.rows) for s in found)
        failed = sum(s.failed for s in found)
        empty = sum(s.empty for s in found)
        if not rows and empty:
            raise CaptureError(
                f"{path}: no tokens: its {empty} completed requests all count 0 (or no) input "
                f"or output tokens{f', {failed} more failed' if failed else ''}: nothing to "
                "time a token by (a server that does not report usage?)"
            )
        if not rows:
            raise CaptureError(f"{path}: errors only: none of its {failed} requests completed")
        failed += empty
        rebuilt = [s.settings for s in found if s.fitted == REBUILT]
        fitted = REBUILT if rebuilt else found[0].fitted
        sources.append(Source(path, label, fitted, len(found), rows, failed, rebuilt))
        streams += [(index, s) for s in found]
    tagged = [(replace(r, source=index), m, s) for index, s in streams for r, m in s.rows]
    models = sorted({m for _, m, _ in tagged if m is not None})
    if model is not None:
        tagged = [row for row in tagged if row[1] == model]
        if not tagged:
            raise CaptureError(f"{paths[0]}: no request of model {model!r} (it has {models})")
    elif len(models) > 1:
        raise CaptureError(
            f"{paths[0]}: requests of several models ({', '.join(models)}): choose one with --model"
        )
    timed = sum(1 for r, _, _ in tagged if r.measured and r.ttft is not None)
    if timed < MIN_REQUESTS:
        raise CaptureError(
            f"{paths[0]}: {timed} requests with timings; a fit needs at least {MIN_REQUESTS}"
        )
    requests = _timeline(tagged)
    return Capture(
        requests,
        model or (models[0] if models else None),
        sum(s.failed + s.empty for _, s in streams),
        sources,
    )


def _timeline(tagged: list[tuple[Captured, str | None, Stream]]) -> list[Captured]:
    """The streams' requests on one timeline from 0: streams on the wall clock that overlap
    are one load; loads follow each other in the order given, each after the one before
    has drained."""
    loads: list[list[Captured]] = []
    spans: list[tuple[float, float]] = []  # of the wall-clock loads
    for stream in _distinct(s for _, _, s in tagged):
        rows = sorted((r for r, _, s in tagged if s is stream), key=lambda r: r.arrival)
        if not rows:
            continue
        span = (rows[0].arrival, rows[-1].arrival)
        joined = next(
            (
                k
                for k, (lo, hi) in enumerate(spans)
                if stream.wall_clock and lo <= span[1] and span[0] <= hi
            ),
            None,
        )
        if joined is None:
            loads.append(rows)
            spans.append(span if stream.wall_clock else (float("nan"), float("nan")))
        else:
            loads[joined] = sorted(loads[joined] + rows, key=lambda r: r.arrival)
            lo, hi = spans[joined]
            spans[joined] = (min(lo, span[0]), max(hi, span[1]))
    out: list[Captured] = []
    start = 0.0
    for rows in loads:
        first = rows[0].arrival
        out += [replace(r, arrival=r.arrival - first + start) for r in rows]
        start = out[-1].arrival + _drain(rows)
    return out


def _distinct(streams: Iterable[Stream]) -> list[Stream]:
    """Each stream once, in the order first seen (a Stream is not hashable)."""
    seen: list[Stream] = []
    for s in streams:
        if not any(s is t for t in seen):
            seen.append(s)
    return seen


def _drain(rows: list[Captured]) -> float:
    """An idle gap after a load long enough for the engine to finish it."""
    last = rows[-1].arrival
    tail = max(
        r.arrival + (r.ttft or 0.0) + (r.tpot or 0.0) * max(0, r.output_tokens - 1) - last
        for r in rows
    )
    return max(DRAIN_MIN, DRAIN_FACTOR * tail)
