"""One proxied request from arrival to last byte, and the single place it is recorded.

Whatever happens to a request (completed, refused, upstream down, client gone), `finish`
runs exactly once and writes one SERVER span (plus the CLIENT span if the upstream was
called), one set of metric observations and one log line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from latency_proxy import instruments as ins
from latency_proxy import semconv as sc
from latency_proxy.config import Route
from latency_proxy.logs import bind_request, escape
from latency_proxy.meter import RequestTiming, StreamMeter
from latency_proxy.model_call import ModelCall
from latency_proxy.outcome import Outcome, UpstreamErrorKind
from latency_proxy.redact import ContentPolicy, request_texts
from latency_proxy.telemetry import Telemetry

log = logging.getLogger("latency_proxy.access")


@dataclass(slots=True)
class Exchange:
    telemetry: Telemetry
    request_id: str
    method: str
    path: str
    t0: float  # perf_counter at arrival
    wall0_ns: int  # time_ns at arrival, to place span timestamps
    server_span: Span
    first_n: tuple[int, ...]
    policy: ContentPolicy
    call: ModelCall | None = None  # set on the measured endpoints
    route: Route | None = None
    status: int = 0
    outcome: Outcome = Outcome.OK
    error_type: str | None = None
    upstream_error_kind: UpstreamErrorKind | None = None
    client_span: Span | None = None
    meter: StreamMeter | None = None
    t_upstream_call: float | None = None
    overhead_event_sum: float = 0.0
    overhead_events: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    active_labels: tuple[str, str, str] | None = None
    input_texts: list[tuple[str, str]] | None = None  # only when content is captured
    finished: bool = field(default=False)

    # -- lifecycle -------------------------------------------------------------------------

    def labels(self) -> tuple[str, str, str]:
        call = self.call
        operation = call.operation if call and call.operation else ""
        return operation, self.recorded_model() or "", self.route.name if self.route else ""

    def recorded_model(self) -> str | None:
        """The request's model name as sinks may record it (see telemetry.ModelLabels)."""
        return self.telemetry.model_label(self.call.model if self.call else None) or None

    def _client_span_name(self) -> str:
        call = self.call
        if call is None or call.operation is None:
            return self.method
        model = self.recorded_model() or (self.route.name if self.route else "")
        return f"{call.operation} {model}"

    def admitted(self) -> None:
        """The request will be sent upstream: count it in flight."""
        self.active_labels = self.labels()
        self.telemetry.instrument(ins.ACTIVE).record(1, self.active_labels)

    def capture_input(self, body: bytes) -> None:
        """Keep the request's texts for the content policy (only called when it captures)."""
        try:
            self.input_texts = request_texts(orjson.loads(body))
        except orjson.JSONDecodeError:
            self.input_texts = []

    def _content(self, timing: RequestTiming | None) -> dict[str, str]:
        """gen_ai.input/output.messages as the policy allows (GenAI conventions, JSON)."""
        if not self.policy.captures:
            return {}
        out: dict[str, str] = {}
        inputs = self.policy.messages(self.input_texts or [])
        if inputs:
            out[sc.GEN_AI_INPUT_MESSAGES] = orjson.dumps(inputs).decode()
        if timing is not None and timing.output_text is not None:
            reason = timing.finish_reasons[-1] if timing.finish_reasons else None
            outputs = self.policy.messages([("assistant", timing.output_text)], reason)
            if outputs:
                out[sc.GEN_AI_OUTPUT_MESSAGES] = orjson.dumps(outputs).decode()
        return out

    def start_client_span(self) -> Span:
        call, route = self.call, self.route
        assert route is not None
        attributes: dict[str, Any] = {
            sc.SERVER_ADDRESS: route.host,
            sc.SERVER_PORT: route.port,
            sc.HTTP_REQUEST_METHOD: self.method,
            sc.REQUEST_ID: self.request_id,
        }
        if call and call.operation:
            attributes[sc.GEN_AI_OPERATION_NAME] = call.operation
            attributes[sc.GEN_AI_PROVIDER_NAME] = self.telemetry.provider_name
            attributes[sc.GEN_AI_REQUEST_STREAM] = call.stream
            if call.max_tokens is not None:
                attributes[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_tokens
            if call.temperature is not None:
                attributes[sc.GEN_AI_REQUEST_TEMPERATURE] = call.temperature
        context = trace.set_span_in_context(self.server_span)
        span = self.telemetry.tracer.start_span(
            self._client_span_name(), context, SpanKind.CLIENT, attributes
        )
        self.client_span = span
        return span

    def fail(
        self, outcome: Outcome, error_type: str, upstream_kind: UpstreamErrorKind | None = None
    ) -> None:
        self.outcome = outcome
        self.error_type = error_type
        if upstream_kind is not None:
            self.upstream_error_kind = upstream_kind

    @property
    def request_overhead_s(self) -> float | None:
        """Request in to request handed to the upstream client."""
        return None if self.t_upstream_call is None else self.t_upstream_call - self.t0

    @property
    def event_overhead_s(self) -> float | None:
        """Mean per chunk, upstream bytes in to client send done."""
        return self.overhead_event_sum / self.overhead_events if self.overhead_events else None

    def _wall_ns(self, t: float) -> int:
        return self.wall0_ns + int((t - self.t0) * 1e9)

    def finish(self, t_end: float) -> None:
        """Record everything about this request, once."""
        if self.finished:
            return
        self.finished = True
        context = self.server_span.get_span_context()
        bind_request(self.request_id, context)  # finish may run outside the request's task
        timing = self.meter.finish(t_end) if self.meter is not None else None
        call = self.call
        if call and call.model and 200 <= self.status < 400 and self.upstream_error_kind is None:
            self.telemetry.model_label.confirm(call.model)
        trace_id = format(context.trace_id, "032x")
        content = self._content(timing)
        sinks = [
            lambda: self._end_spans(timing, t_end, content),
            lambda: self._log(timing, t_end, content),
        ]
        if self.call is not None and self.call.operation:
            sinks.insert(0, lambda: self._record_metrics(timing, trace_id))
        for sink in sinks:
            try:  # one failing sink must not cost the others their record
                sink()
            except Exception as exc:
                log.error("recording failed", exc_info=exc)

    # -- sinks -----------------------------------------------------------------------------

    def _record_metrics(self, timing: RequestTiming | None, trace_id: str) -> None:
        tel = self.telemetry
        labels = self.labels()
        if self.active_labels is not None:
            tel.instrument(ins.ACTIVE).record(-1, self.active_labels)
        tel.instrument(ins.REQUESTS).record(1, (*labels, str(self.status), self.outcome.value))
        if self.upstream_error_kind is not None:
            tel.instrument(ins.UPSTREAM_ERRORS).record(1, (*labels, self.upstream_error_kind.value))
        if timing is None:
            return
        context = trace.set_span_in_context(self.client_span or self.server_span)

        def observe(spec: ins.Spec, value: float | None, *extra: str) -> None:
            if value is not None:
                tel.instrument(spec).record(value, (*labels, *extra), trace_id, context)

        observe(ins.DURATION, timing.e2e_s)
        observe(ins.TOKEN_USAGE, timing.input_tokens, "input")
        observe(ins.TOKEN_USAGE, timing.output_tokens, "output")
        observe(ins.OVERHEAD, self.request_overhead_s, "request")
        observe(ins.OVERHEAD, self.event_overhead_s, "event")
        if not (self.call and self.call.stream):
            return
        observe(ins.TIME_TO_FIRST_CHUNK, timing.time_to_first_chunk_s)
        observe(ins.TTFT, timing.ttft_s)
        observe(ins.TPOT, timing.tpot_s)
        for n, seconds in timing.ttfnt_s.items():
            observe(ins.TIME_TO_FIRST_N_TOKENS, seconds, str(n))
        tel.instrument(ins.TIME_PER_OUTPUT_CHUNK).record_all(
            timing.itl_s, labels, trace_id, context
        )
        tel.instrument(ins.TOKENS_PER_CHUNK).record_all(
            timing.tokens_per_chunk, labels, None, context
        )

    def _end_spans(
        self, timing: RequestTiming | None, t_end: float, content: dict[str, str]
    ) -> None:
        server, client = self.server_span, self.client_span
        server.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, self.status)
        server.set_attribute(sc.OUTCOME_ATTR, self.outcome.value)
        overheads = {
            sc.OVERHEAD_REQUEST_S: self.request_overhead_s,
            sc.OVERHEAD_EVENT_S: self.event_overhead_s,
        }
        server.set_attributes({k: v for k, v in overheads.items() if v is not None})
        kind = self.upstream_error_kind
        transport_failed = kind is not None and kind.transport
        if self.status >= 500 or transport_failed or self.outcome is Outcome.PROXY_ERROR:
            server.set_attribute(sc.ERROR_TYPE, self.error_type or str(self.status))
            server.set_status(Status(StatusCode.ERROR))
        if client is not None:
            model = self.recorded_model()
            if model is not None:
                client.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
                client.update_name(self._client_span_name())
            if timing is not None:
                self._timing_attributes(client, timing)
            client.set_attributes(content)
            client.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, self.status)
            if self.status >= 400 or self.upstream_error_kind is not None:
                client.set_attribute(sc.ERROR_TYPE, self.error_type or str(self.status))
                client.set_status(Status(StatusCode.ERROR))
            client.end(self._wall_ns(t_end))
        server.end(self._wall_ns(t_end))

    def _timing_attributes(self, span: Span, timing: RequestTiming) -> None:
        values = {
            sc.GEN_AI_RESPONSE_MODEL: timing.response_model,
            sc.GEN_AI_RESPONSE_ID: timing.response_id,
            sc.GEN_AI_USAGE_INPUT_TOKENS: timing.input_tokens,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: timing.output_tokens,
            sc.E2E_S: timing.e2e_s,
            sc.TTFT_S: timing.ttft_s,
            sc.TPOT_S: timing.tpot_s,
            sc.TIME_TO_FIRST_CHUNK_S: timing.time_to_first_chunk_s,
        }
        span.set_attributes({key: value for key, value in values.items() if value is not None})
        if timing.finish_reasons:
            span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, timing.finish_reasons)
        if self.call and self.call.stream:
            span.set_attribute(sc.CHUNKS, timing.content_events)
            span.set_attribute(sc.TOKEN_SOURCE, timing.token_source.value)
            if timing.ttfnt_s:
                span.set_attribute(sc.TTFNT_N, list(timing.ttfnt_s))
                span.set_attribute(sc.TTFNT_S, list(timing.ttfnt_s.values()))
            if timing.ttft_s is not None:
                span.add_event(
                    sc.GEN_AI_FIRST_TOKEN_EVENT,
                    {sc.TTFT_S: timing.ttft_s},
                    self.wall0_ns + int(timing.ttft_s * 1e9),
                )

    def _log(self, timing: RequestTiming | None, t_end: float, content: dict[str, str]) -> None:
        call = self.call
        fields: dict[str, object] = {
            "method": self.method,
            "path": self.path,
            "route": self.route.name if self.route else None,
            "model": escape(model, 128) if (model := self.recorded_model()) else None,
            "operation": call.operation if call else None,
            "stream": call.stream if call else None,
            "status": self.status,
            "outcome": self.outcome.value,
            "error_type": self.error_type,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "e2e_s": round(t_end - self.t0, 6),
        }
        if timing is not None:
            fields.update(
                ttft_s=timing.ttft_s,
                tpot_s=timing.tpot_s,
                time_to_first_chunk_s=timing.time_to_first_chunk_s,
                input_tokens=timing.input_tokens,
                output_tokens=timing.output_tokens,
                chunks=timing.content_events,
                finish_reasons=timing.finish_reasons or None,
            )
        if content:
            fields.update(
                input_messages=content.get(sc.GEN_AI_INPUT_MESSAGES),
                output_messages=content.get(sc.GEN_AI_OUTPUT_MESSAGES),
            )
        level = logging.INFO if self.outcome.routine else logging.WARNING
        log.log(level, "request", extra={"fields": fields})
