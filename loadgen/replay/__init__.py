"""Replaying a trace: `load` is the one place a trace file is read.

- `rows.py` the record every format reads into, and the checks of its numbers
- `formats.py` trace files in, TraceRecords out
- `otlp.py` agents' model calls from GenAI spans in OTLP JSON
- `aiperf.py` AIPerf's multi_turn datasets: sessions of turns
- `turns.py` sessions of turns, each after the answer to the one before
- `inference_perf.py` inference-perf's OTel trace files: flat GenAI spans
- `window.py` which records a run replays, and when each is due
- `prompts.py` prompt text for replayed records
- `sessions.py` an agent trace's call graph: which call waits for which
- `flags.py` --replay and its companions, for both engines
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latency_proxy.base.setting_types import WEEK_S
from loadgen.replay import sessions
from loadgen.replay.formats import BadRow, Parsed, parse
from loadgen.replay.prompts import DEFAULT_BLOCK_TOKENS, PromptBook
from loadgen.replay.window import Arrival, duration_for, schedule, share, split, window

__all__ = [
    "Arrival",
    "PromptBook",
    "Replay",
    "ReplaySettings",
    "fit",
    "load",
    "reach",
    "sessions",
    "share",
    "split",
]

MAX_BAD_ROWS_SHOWN = 20  # run.json lists this many of the skipped rows


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySettings:
    """--replay and its companions, as a RunConfig keeps them."""

    file: str
    format: str | None = None  # None: detected from the content
    speed: float = 1.0
    gap_scale: float = 1.0  # an agent's think and tool times, scaled
    start_s: float = 0.0
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    skip_bad_rows: bool = False


@dataclass(frozen=True, slots=True)
class Replay:
    """A trace's window, timed, and what run.json says about it."""

    arrivals: list[Arrival]
    meta: dict[str, Any]


def load(settings: ReplaySettings, duration_s: float | None, requests: int | None) -> Replay:
    """The window of the trace file; ValueError naming the file (and line) when it is bad."""
    path, raw, parsed = _read(settings)
    try:
        chosen = window(parsed.records, settings.start_s, duration_s, requests)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    arrivals = schedule(chosen, settings.speed)
    if arrivals[-1].offset_s > WEEK_S:  # a replay that would not end: a timestamp far off
        last = arrivals[-1].record
        raise ValueError(
            f"{path}:{last.line}: due {arrivals[-1].offset_s:.3g} s after the window opens, "
            "past a week of replay: close the window (--duration, --requests) or speed it up"
        )
    return Replay(arrivals, _meta(settings, path, raw, parsed, arrivals, duration_s, requests))


def reach(settings: ReplaySettings, count: int) -> float | None:
    """The --duration (trace time, whole seconds) whose window holds `count` records; None
    when the trace holds fewer from the window's start on."""
    _, _, parsed = _read(settings)
    return duration_for(parsed.records, settings.start_s, count)


# the last trace parsed, by the file's identity and how it was read: a capacity search reads
# the same file for every probe, and parsing an hour's trace costs more than a short probe
_last: dict[tuple[Any, ...], tuple[bytes, Parsed]] = {}


def _read(settings: ReplaySettings) -> tuple[Path, bytes, Parsed]:
    """The trace file, read and parsed (again only once it changed); ValueError naming the
    file (and line) when it is bad."""
    path = Path(settings.file)
    try:
        stat = path.stat()
        key: tuple[Any, ...] = (str(path.absolute()), stat.st_dev, stat.st_ino, stat.st_size)
        key += (stat.st_mtime_ns, settings.format, settings.skip_bad_rows)
        if key in _last:
            return path, *_last[key]
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"--replay {path}: {exc.strerror or exc}") from None
    parsed = _parse(path, raw, settings)
    _last.clear()
    _last[key] = raw, parsed
    return path, raw, parsed


def _parse(path: Path, raw: bytes, settings: ReplaySettings) -> Parsed:
    try:
        parsed = parse(raw.decode("utf-8"), settings.format, settings.skip_bad_rows)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except BadRow as exc:
        hint = "" if settings.skip_bad_rows else " (--skip-bad-rows skips such rows)"
        raise ValueError(f"{path}:{exc.line}: {exc.reason}{hint}") from None
    return parsed


def fit(trace: Replay, limit: int, settings: ReplaySettings) -> Replay:
    """The window without records longer than the model's context (`limit` tokens, prompt
    and output): an error naming the first, or, with --skip-bad-rows, counted as bad rows."""
    over = [a for a in trace.arrivals if a.record.input_tokens + a.record.output_tokens > limit]
    if not over:
        return trace
    first = over[0].record
    reason = (
        f"{first.input_tokens} + {first.output_tokens} tokens is more than the model's "
        f"context ({limit})"
    )
    if not settings.skip_bad_rows:
        raise ValueError(
            f"{settings.file}:{first.line}: {reason} (--skip-bad-rows skips such rows)"
        )
    kept = [a for a in trace.arrivals if a not in over]
    if not kept:
        raise ValueError(f"{settings.file}: no record of the window fits the model's context")
    bad = trace.meta["bad_rows"]
    listed = [
        {"line": a.record.line, "reason": f"over the model's context ({limit})"} for a in over
    ]
    meta = trace.meta | {
        "bad_rows": {
            "skipped": bad["skipped"] + len(over),
            "first": sorted(bad["first"] + listed, key=lambda b: b["line"])[:MAX_BAD_ROWS_SHOWN],
        }
    }
    meta["window"] = meta["window"] | {"records": len(kept)}
    return Replay(kept, meta)


def _meta(
    settings: ReplaySettings,
    path: Path,
    raw: bytes,
    parsed: Parsed,
    arrivals: list[Arrival],
    duration_s: float | None,
    requests: int | None,
) -> dict[str, Any]:
    return {
        "file": path.name,
        "path": str(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "format": parsed.format,
        "speed": settings.speed,
        "gap_scale": settings.gap_scale,
        "calls": sessions.graph(arrivals).meta(),
        "block_tokens": settings.block_tokens,
        "window": {
            "start_s": settings.start_s,
            "duration_s": duration_s,
            "requests": requests,
            "records": len(arrivals),
            "first_line": arrivals[0].record.line,
            "last_line": arrivals[-1].record.line,
            "span_s": arrivals[-1].offset_s,  # at the replay's speed
        },
        "records_in_file": len(parsed.records),
        "bad_rows": {
            "skipped": len(parsed.bad),
            "first": [
                {"line": b.line, "reason": b.reason} for b in parsed.bad[:MAX_BAD_ROWS_SHOWN]
            ],
        },
        "unreplayable": parsed.unreplayable,
    }
