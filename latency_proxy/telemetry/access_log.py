"""The one log line per request (logger latency_proxy.access; keys: docs/reference/log-line.md).

The line is one dict, built in key order from the two tables below (a new key is one row)
and written as one orjson dump (logs.write_fields).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from operator import attrgetter

from latency_proxy.base import semconv as sc
from latency_proxy.measure.meter import RequestTiming
from latency_proxy.record.exchange import Finished
from latency_proxy.record.session import Placement
from latency_proxy.telemetry.logs import MAX_RECORDED_CHARS, clip, escape, write_fields
from latency_proxy.telemetry.providers import ModelLabels
from latency_proxy.telemetry.redact import ContentPolicy

log = logging.getLogger("latency_proxy.access")

# keys read as the timing's attribute of the same name, but where a getter says otherwise
_TIMING_KEYS = (
    "ttft_s", "tpot_s", "time_to_first_chunk_s", "input_tokens", "output_tokens", "chunks",
    "coalesced_fraction", "invalid_events", "finish_reasons", "answer_ttft_s", "reasoning_s",
    "reasoning_tokens", "reasoning_source", "cached_tokens", "server_queue_s", "server_ttft_s",
    "server_decode_s", "server_itl_s", "spec_acceptance_rate", "spec_acceptance_length",
    "max_itl_s", "stalls",
)  # fmt: skip
_TIMING_GETTERS: dict[str, Callable[[RequestTiming], object]] = {
    "chunks": lambda t: t.content_events,
    "finish_reasons": lambda t: t.finish_reasons or None,
    "reasoning_source": attrgetter("reasoning_source_value"),
}
# after method, path, route, model, operation, stream, status, outcome, error type, bytes, e2e
TIMING_FIELDS: tuple[tuple[str, Callable[[RequestTiming], object]], ...] = tuple(
    (key, _TIMING_GETTERS.get(key, attrgetter(key))) for key in _TIMING_KEYS
)


# an agent's chat call: where it stands in its session (telemetry/sessions.py)
SESSION_FIELDS: tuple[tuple[str, Callable[[Placement], object]], ...] = (
    ("session", attrgetter("session")),
    ("joined_by", attrgetter("joined_by")),
    ("turn", attrgetter("turn")),
    ("parent", attrgetter("parent")),
    ("parent_gap_s", lambda p: _rounded(p.parent_gap_s)),
    ("tools_asked", attrgetter("tools_asked")),
    ("tools_answered", attrgetter("tools_answered")),
    ("prompt_chars", attrgetter("prompt_chars")),
    ("prefix_blocks", lambda p: list(p.prefix_blocks)),
)


class LogWriter:
    def __init__(self, model_label: ModelLabels, policy: ContentPolicy | None = None) -> None:
        self._model_label = model_label
        self._policy = policy

    def write(self, done: Finished) -> None:
        exchange, timing, content = done.exchange, done.timing, done.content
        call, route = exchange.call, exchange.route
        model = self._model_label.recorded(exchange.model)
        fields: dict[str, object] = {
            "arrived_at": round(exchange.wall0_ns / 1e9, 6),  # epoch s: a replay's clock
            "method": exchange.method,
            "path": clip(exchange.path),
            "route": route.name if route else None,
            "model": escape(model, 128) if model else None,
            "operation": call.operation if call else None,
            "stream": call.stream if call else None,
            "status": exchange.status,
            "outcome": exchange.outcome.value,
            "error_type": exchange.error_type,
            "bytes_in": exchange.bytes_in,
            "bytes_out": exchange.bytes_out,
            "e2e_s": round(done.t_end - exchange.t0, 6),
            "loop_lag_max_s": _rounded(exchange.loop_lag_max_s),
        }
        if len(exchange.path) > MAX_RECORDED_CHARS:
            fields["path_length"] = len(exchange.path)
        if exchange.not_measured is not None:
            fields["not_measured"] = exchange.not_measured
        if timing is not None:
            for key, value in TIMING_FIELDS:
                fields[key] = value(timing)
        placement = exchange.placement
        if placement is not None:
            for key, read in SESSION_FIELDS:
                fields[key] = read(placement)
        if self._policy is not None and exchange.input_texts:
            hashes = self._policy.prefix_hashes(exchange.input_texts)
            if hashes:
                fields["prefix_hashes"] = hashes
        if content:
            fields["input_messages"] = content.get(sc.GEN_AI_INPUT_MESSAGES)
            fields["output_messages"] = content.get(sc.GEN_AI_OUTPUT_MESSAGES)
        level = logging.INFO if exchange.outcome.routine else logging.WARNING
        write_fields(log, level, "request", fields)


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)
