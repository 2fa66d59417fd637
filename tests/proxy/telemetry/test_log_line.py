"""The access line written straight to the JSON handler is the line logging would write."""

from __future__ import annotations

import io
import logging
import time

import orjson
import pytest
from opentelemetry.trace import SpanContext, TraceFlags

from latency_proxy.telemetry import logs

FIELDS = {
    "method": "POST",
    "path": "/v1/chat/completions",
    "model": "m",
    "status": 200,
    "e2e_s": 0.123456,
    "ttft_s": 0.05,
    "finish_reasons": ["stop"],
    "nested": {"a": [1, 2.5, None]},
    "odd": object,  # not JSON: both paths fall back to str()
}


@pytest.fixture
def stream(monkeypatch):
    """logs.configure's handler, writing to a buffer; logging restored afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logs.configure("info", "json")
    buffer = io.StringIO()
    root.handlers[0].setStream(buffer)
    monkeypatch.setattr(time, "time", lambda: 1_700_000_123.4567)
    yield buffer
    root.handlers[:], root.level = saved
    monkeypatch.setattr(logs, "_direct", None)


def lines(buffer: io.StringIO) -> list[bytes]:
    return buffer.getvalue().encode().splitlines()


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
def test_the_direct_line_is_byte_identical_to_the_logging_one(stream, level) -> None:
    logger = logging.getLogger("latency_proxy.access")
    logs.bind_request("rid-1", _context())
    logs.write_fields(logger, level, "request", FIELDS)
    logger.log(level, "request", extra={"fields": FIELDS})
    direct, through_logging = lines(stream)
    assert direct == through_logging
    line = orjson.loads(direct)
    assert line["request_id"] == "rid-1" and line["ts"] == "2023-11-14T22:15:23.456Z"
    assert list(line)[:7] == ["ts", "level", "logger", "msg", "request_id", "trace_id", "span_id"]


def test_a_line_below_the_level_is_not_written(stream) -> None:
    logging.getLogger().setLevel("WARNING")
    logs.write_fields(logging.getLogger("latency_proxy.access"), logging.INFO, "request", FIELDS)
    assert lines(stream) == []


def test_another_handler_on_the_path_gets_the_line_through_logging(stream) -> None:
    logger = logging.getLogger("latency_proxy.access")
    seen: list[logging.LogRecord] = []
    extra = logging.Handler()
    extra.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(extra)
    try:
        logs.write_fields(logger, logging.INFO, "request", FIELDS)
    finally:
        logger.removeHandler(extra)
    assert [r.fields for r in seen] == [FIELDS]  # type: ignore[attr-defined]
    assert len(lines(stream)) == 1  # and the JSON handler still wrote it, once


def _context() -> SpanContext:
    return SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1))
