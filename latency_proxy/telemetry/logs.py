"""One JSON object per log line, with the request id and trace context of the current request.

Exception messages can quote request bodies (a parser echoing bad input), so tracebacks
are written as exception types and frames only: no message, no source line.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
import traceback
from typing import Any

import orjson
from opentelemetry.trace import SpanContext

# the current request's id and span context (its ids are formatted only for a line written)
request_var: contextvars.ContextVar[tuple[str, SpanContext] | None] = contextvars.ContextVar(
    "request", default=None
)

# set in a request's task once the proxy recorded why its response stays incomplete
cut_var: contextvars.ContextVar[bool] = contextvars.ContextVar("cut", default=False)

logger = logging.getLogger("latency_proxy")
# the most of a client-supplied value (a path, a header's) a log line or span records
MAX_RECORDED_CHARS = 2048
CUT = "…"  # ends a value cut at that bound
# the control characters (Unicode's Cc: C0, DEL, C1): a terminal acts on them (ESC, CSI)
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}


def bind_request(request_id: str, context: SpanContext) -> None:
    """Stamp the log lines of the current task with a request's id and trace context."""
    request_var.set((request_id, context))


def cut_recorded() -> None:
    """This request's response is cut on purpose and its record says why (a stream cut at
    the drain deadline, a client past the write timeout): uvicorn's own report of the
    incomplete response ("Exception in ASGI application", "ASGI callable returned without
    completing response") would be a second, error-level line for one request."""
    cut_var.set(True)


class _RecordedCuts(logging.Filter):
    """Drops uvicorn's lines about a response cut that the proxy has already recorded."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not cut_var.get()


def clip(text: str, limit: int = MAX_RECORDED_CHARS) -> str:
    """A client-supplied value as recorded (log line, span attribute): at most `limit`
    characters, then CUT, so a cut value says it was cut (its record carries the length)."""
    return text if len(text) <= limit else text[:limit] + CUT


def escape(text: str, limit: int = 256) -> str:
    """Make a client-supplied value safe for a single log line or an error answer: no
    CR/LF or other control character, each shown as its escape."""
    return clip(text, limit).translate(_CONTROL)


def safe_traceback(exc: BaseException) -> str:
    """Exception chain as types and frames, never messages."""
    lines = []
    for frame in traceback.extract_tb(exc.__traceback__):
        lines.append(f"{frame.filename}:{frame.lineno} in {frame.name}")
    lines.append(type(exc).__module__ + "." + type(exc).__qualname__)
    if exc.__cause__ is not None:
        lines.append("caused by " + safe_traceback(exc.__cause__))
    return " | ".join(lines)


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def _timestamp(created: float) -> str:
    """time.time() as the lines' `ts`: UTC, milliseconds (as LogRecord computes them). The
    second's text is formatted once per second (strftime is most of a line's clock)."""
    global _second
    second = int(created)
    known, text = _second
    if second != known:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = (second, text)  # one assignment: safe for the exporters' threads
    return f"{text}.{int((created - second) * 1000):03d}Z"


_worker: int | None = None  # this process's number among several workers (configure)


def _line(created: float, level: str, name: str, msg: str) -> dict[str, Any]:
    """The keys every line starts with, in order."""
    bound = request_var.get()
    context = bound[1] if bound else None
    line: dict[str, Any] = {
        "ts": _timestamp(created),
        "level": level,
        "logger": name,
        "msg": msg,
        "request_id": bound[0] if bound else None,
        "trace_id": format(context.trace_id, "032x") if context else None,
        "span_id": format(context.span_id, "016x") if context else None,
    }
    if _worker is not None:
        line["worker"] = _worker
    return line


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = _line(record.created, record.levelname.lower(), record.name, record.getMessage())
        fields = getattr(record, "fields", None)
        if fields:
            line.update(fields)
        if record.exc_info and record.exc_info[1] is not None:
            line["exception"] = safe_traceback(record.exc_info[1])
        return orjson.dumps(line, default=str).decode()


class _JSONLines(logging.StreamHandler):
    """The JSON handler configure() installs; `write_fields` may bypass logging for it."""


def write_fields(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """One line of `fields` (no exception) at `level`, exactly as logger.log(level, msg,
    extra={"fields": fields}) would write it through the JSON handler — but when that
    handler is the only one on the path, as one orjson dump written to its stream, without
    the LogRecord, the caller lookup and the formatter call a line costs in logging."""
    if not logger.isEnabledFor(level):
        return
    handler = _direct
    if handler is None or not _only_through(logger, handler) or level < handler.level:
        logger.log(level, msg, extra={"fields": fields})
        return
    line = _line(time.time(), logging.getLevelName(level).lower(), logger.name, msg)
    line.update(fields)
    text = orjson.dumps(line, default=str).decode() + handler.terminator
    with handler.lock:
        handler.stream.write(text)
        handler.flush()


class TextFormatter(JSONFormatter):
    """For a terminal: the same facts as key=value pairs."""

    def format(self, record: logging.LogRecord) -> str:
        line = orjson.loads(super().format(record))
        head = f"{line.pop('ts')} {line.pop('level'):7} {escape(line.pop('msg'), 4096)}"
        rest = " ".join(
            f"{k}={escape(str(v), 4096)}"
            for k, v in line.items()
            if v is not None and k != "logger"
        )
        return f"{head} {rest}"


def _only_through(logger: logging.Logger, handler: logging.Handler) -> bool:
    """Whether a line from logger reaches `handler` alone, unfiltered, unchanged."""
    node: logging.Logger | None = logger
    while node is not None and node is not logging.root:
        if node.handlers or node.filters or node.disabled or not node.propagate:
            return False
        node = node.parent
    root = logging.root
    return root.handlers == [handler] and not root.filters and not handler.filters


_direct: _JSONLines | None = None  # the handler write_fields may write to itself


def configure(level: str, fmt: str, worker: int | None = None) -> None:
    """Route our logs and uvicorn's through one formatter on stdout; a worker of several
    (--workers) names itself on each line."""
    global _direct, _worker
    _worker = worker
    handler = _JSONLines(sys.stdout) if fmt == "json" else logging.StreamHandler(sys.stdout)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    _direct = handler if fmt == "json" else None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        log = logging.getLogger(name)
        log.handlers[:] = []
        log.propagate = True
    logging.getLogger("uvicorn.error").addFilter(_RecordedCuts())
    logging.getLogger("uvicorn.access").disabled = True
