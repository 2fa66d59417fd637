"""The single place a finished request is recorded.

Whatever happened to a request (completed, refused, upstream down, client gone), `finish`
runs exactly once and writes one SERVER span (plus the CLIENT span if the upstream was
called), one set of metric observations (model calls only) and one log line. A failing
writer is logged and costs the others nothing.
"""

from __future__ import annotations

import logging

import orjson

from latency_proxy.base import semconv as sc
from latency_proxy.measure.meter import RequestTiming
from latency_proxy.record.exchange import Exchange, Finished
from latency_proxy.telemetry.access_log import LogWriter
from latency_proxy.telemetry.logs import bind_request
from latency_proxy.telemetry.metrics import MetricsWriter
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
from latency_proxy.telemetry.sessions import SessionTable
from latency_proxy.telemetry.spans import SpanWriter

log = logging.getLogger("latency_proxy.access")


class RequestWriter:
    """The process's three writers; the forwarder starts spans and counts through them."""

    def __init__(self, telemetry: Telemetry, policy: ContentPolicy, sessions: SessionTable) -> None:
        self.spans = SpanWriter(telemetry)
        self.sessions = sessions
        self.metrics = MetricsWriter(telemetry)
        self._access_log = LogWriter(telemetry.model_label, policy)
        self._model_label = telemetry.model_label
        self._policy = policy

    def finish(self, exchange: Exchange, t_end: float) -> None:
        """Record everything about this exchange, once; t_end is its last byte."""
        if exchange.finished:
            return
        exchange.finished = True
        context = exchange.server_span.context
        bind_request(exchange.request_id, context)  # may run outside the request's task
        timing = self._timing(exchange, t_end)
        if exchange.operation == sc.OPERATION_CHAT:
            try:
                exchange.placement = self.sessions.place(exchange, t_end)
            except Exception as exc:  # costs the call its session, never its record
                log.error("recording failed", exc_info=exc)
        model = exchange.model
        if model and 200 <= exchange.status < 400 and exchange.upstream_error_kind is None:
            self._model_label.confirm(model)
        # an exemplar links to a trace only if the sampler kept it (OTEL_TRACES_SAMPLER)
        trace_id = format(context.trace_id, "032x") if context.trace_flags.sampled else None
        content = self._content(exchange, timing)
        done = Finished(exchange, timing, t_end, content)
        writers = [lambda: self.spans.end(done), lambda: self._access_log.write(done)]
        if exchange.operation:
            writers.insert(0, lambda: self.metrics.record(exchange, timing, trace_id))
        for write in writers:
            try:
                write()
            except Exception as exc:
                log.error("recording failed", exc_info=exc)

    @staticmethod
    def _timing(exchange: Exchange, t_end: float) -> RequestTiming | None:
        """The meter's figures; a meter that fails costs the figures, never the record."""
        if exchange.meter is None:
            return None
        try:
            return exchange.meter.finish(t_end)
        except Exception as exc:
            log.error("recording failed", exc_info=exc)
            return None

    def _content(self, exchange: Exchange, timing: RequestTiming | None) -> dict[str, str]:
        """gen_ai.input/output.messages as the policy allows (GenAI conventions, JSON)."""
        policy = self._policy
        if not policy.captures:
            return {}
        out: dict[str, str] = {}
        inputs = policy.messages(exchange.input_texts or [])
        if inputs:
            out[sc.GEN_AI_INPUT_MESSAGES] = orjson.dumps(inputs).decode()
        if timing is not None and timing.output_text is not None:
            reason = timing.finish_reasons[-1] if timing.finish_reasons else None
            outputs = policy.messages([("assistant", timing.output_text)], reason)
            if outputs:
                out[sc.GEN_AI_OUTPUT_MESSAGES] = orjson.dumps(outputs).decode()
        return out
