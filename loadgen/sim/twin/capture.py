"""A capture of a deployment's traffic, as a fit reads it: the proxy's request log lines or
a loadgen run directory (its requests.jsonl). Pure parsing but for reading the files.

The simulator reads these formats itself (of the load generator it imports only the
JSON-lines reader every part shares, loadgen.jsonl): what it needs of a request is when it
arrived, its lengths, the prefix-cache hit, and what was measured — TTFT and TPOT and, with
vLLM's --enable-per-request-metrics, the server's queue, prefill (scheduled to first token)
and decode times. Failed requests are counted, not
replayed; requests outside a run's measured window (warmup, cooldown) still loaded the
server, so they are replayed but not fitted to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from loadgen.jsonl import strict_objects

if TYPE_CHECKING:
    from loadgen.sim.twin.deployment import Request, Timing

ACCESS_LOGGER = "latency_proxy.access"  # the proxy's request lines (docs/reference/log-line.md)
MIN_REQUESTS = 50  # with timings: fewer cannot bound a P90, nor tell the terms apart
# a figure past these is no measurement of a request (seconds)
MAX_SECONDS = 24 * 3600.0


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


class CaptureError(ValueError):
    """Input a fit cannot use; the message names the file (and line)."""


@dataclass(frozen=True, slots=True)
class Captured:
    """One request as captured. Times in seconds; arrival on the capture's own clock."""

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


@dataclass(frozen=True, slots=True)
class Capture:
    requests: list[Captured]  # in arrival order, arrivals from 0
    model: str | None
    failed: int  # requests that did not complete (not replayed)
    sources: list[str]


def read(sources: list[str], model: str | None = None) -> Capture:
    """Every source's requests, merged in arrival order; CaptureError for input a fit
    cannot use."""
    rows: list[tuple[Captured, str | None]] = []
    failed = 0
    for source in sources:
        path = Path(source)
        file = path / "requests.jsonl" if path.is_dir() else path
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CaptureError(f"{file}: cannot read it ({exc})") from None
        found, bad, empty = _parse(file, text)
        if not found and not bad and not empty:
            raise CaptureError(
                f"{file}: no request lines (the proxy's {ACCESS_LOGGER} lines or a loadgen "
                "requests.jsonl)"
            )
        if not found and empty:
            raise CaptureError(
                f"{file}: no tokens: its {empty} completed requests all count 0 (or no) input "
                f"or output tokens{f', {bad} more failed' if bad else ''}: nothing to time "
                "a token by (a server that does not report usage?)"
            )
        if not found:
            raise CaptureError(f"{file}: errors only: none of its {bad} requests completed")
        rows += found
        failed += bad + empty
    models = sorted({m for _, m in rows if m is not None})
    if model is not None:
        rows = [(r, m) for r, m in rows if m == model]
        if not rows:
            raise CaptureError(f"{sources[0]}: no request of model {model!r} (it has {models})")
    elif len(models) > 1:
        raise CaptureError(
            f"{sources[0]}: requests of several models ({', '.join(models)}): "
            "choose one with --model"
        )
    timed = sum(1 for r, _ in rows if r.measured and r.ttft is not None)
    if timed < MIN_REQUESTS:
        raise CaptureError(
            f"{sources[0]}: {timed} requests with timings; a fit needs at least {MIN_REQUESTS}"
        )
    rows.sort(key=lambda row: row[0].arrival)
    start = rows[0][0].arrival
    requests = [_shift(r, start) for r, _ in rows]
    return Capture(requests, model or (models[0] if models else None), failed, list(sources))


def _shift(r: Captured, start: float) -> Captured:
    return Captured(
        r.arrival - start,
        r.prompt_tokens,
        r.output_tokens,
        r.cached_tokens,
        r.ttft,
        r.tpot,
        r.server_queue,
        r.server_prefill,
        r.server_decode,
        r.measured,
    )


def _parse(file: Path, text: str) -> tuple[list[tuple[Captured, str | None]], int, int]:
    """The requests of one file with their model, how many failed, and how many completed
    with no tokens counted (neither is replayed)."""
    found: list[tuple[Captured, str | None]] = []
    failed = empty = 0
    first_target: object = None
    for number, item in strict_objects(text, str(file), CaptureError):
        if "intended_at" in item:  # loadgen's requests.jsonl: its first target only
            first_target = first_target or item.get("target")
            if item.get("target") != first_target:
                continue
            arrival_key, ok, model = "sent_at", bool(item.get("ok")), None
            measured = not item.get("excluded")
        elif item.get("logger") == ACCESS_LOGGER and item.get("msg") == "request":
            if not item.get("operation"):
                continue  # not a generation (a model list, a health check)
            arrival_key, ok, measured = "arrived_at", item.get("outcome") == "ok", True
            model = item.get("model") if isinstance(item.get("model"), str) else None
        else:
            continue
        if not ok:
            failed += 1
            continue
        if not item.get("output_tokens") or not item.get("input_tokens"):
            empty += 1
            continue
        at = f"{file}:{number}"
        server_ttft = _seconds(item, "server_ttft_s", at)
        found.append(
            (
                Captured(
                    arrival=_number(item, arrival_key, at, 1e11),
                    prompt_tokens=int(_number(item, "input_tokens", at, 1e7)),
                    output_tokens=int(_number(item, "output_tokens", at, 1e7)),
                    cached_tokens=int(_number(item, "cached_tokens", at, 1e7, 0)),
                    ttft=_seconds(item, "ttft_s", at),
                    tpot=_seconds(item, "tpot_s", at) or None,  # 0: every token in one
                    # delivery (a starved client or proxy), which says nothing of decoding
                    server_queue=_seconds(item, "server_queue_s", at),
                    server_prefill=server_ttft,
                    server_decode=_seconds(item, "server_decode_s", at),
                    measured=measured,
                ),
                model,
            )
        )
    return found, failed, empty


def _seconds(item: dict, key: str, at: str) -> float | None:
    value = item.get(key)
    return None if value is None else _number(item, key, at, MAX_SECONDS)


def _number(item: dict, key: str, at: str, limit: float, default: float | None = None) -> float:
    value = item.get(key, default)
    if value is None:
        if default is not None:
            return default
        raise CaptureError(f"{at}: no {key}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CaptureError(f"{at}: {key} is not a number")
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise CaptureError(f"{at}: {key} {value} is out of range [0, {limit:g}]")
    return float(value)
