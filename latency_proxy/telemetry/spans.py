"""The request's spans: a SERVER span for what the client asked, a CLIENT span for the
call upstream (GenAI semantic conventions), both ended with the exchange's figures."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from latency_proxy.exchange import Exchange
from latency_proxy.meter import RequestTiming
from latency_proxy.outcome import Outcome
from latency_proxy.telemetry import semconv as sc
from latency_proxy.telemetry.logs import MAX_RECORDED_CHARS, clip
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.types import Scope


class SpanWriter:
    def __init__(self, telemetry: Telemetry) -> None:
        self._tracer = telemetry.tracer
        self._provider_name = telemetry.provider_name
        self._model_label = telemetry.model_label
        self._latest_gen_ai = telemetry.latest_gen_ai

    def start_server(
        self, scope: Scope, request_id: str, measured: bool, parent: Context, wall0_ns: int
    ) -> Span:
        method, path = scope["method"], scope["path"]
        name = f"{method} {path}" if measured or path == "/v1/models" else method
        attributes: dict[str, Any] = {
            sc.HTTP_REQUEST_METHOD: method,
            sc.URL_PATH: clip(path),
            sc.URL_SCHEME: scope.get("scheme", "http"),
            sc.NETWORK_PROTOCOL_VERSION: scope.get("http_version", "1.1"),
            sc.REQUEST_ID: request_id,
        }
        if len(path) > MAX_RECORDED_CHARS:
            attributes[sc.URL_PATH_LENGTH] = len(path)
        if measured:
            attributes[sc.HTTP_ROUTE] = path
        server = scope.get("server")
        if server:
            attributes[sc.SERVER_ADDRESS] = str(server[0])
            if server[1] is not None:  # None: a socket without a port (ASGI spec)
                attributes[sc.SERVER_PORT] = int(server[1])
        client = scope.get("client")
        if client:
            attributes[sc.CLIENT_ADDRESS] = str(client[0])
        return self._tracer.start_span(
            name, parent, SpanKind.SERVER, attributes, start_time=wall0_ns
        )

    def start_client(self, exchange: Exchange) -> Span:
        """The upstream call's span, a child of the SERVER span, kept on the exchange."""
        call, route = exchange.call, exchange.route
        assert route is not None
        attributes: dict[str, Any] = {
            sc.SERVER_ADDRESS: route.host,
            sc.SERVER_PORT: route.port,
            sc.HTTP_REQUEST_METHOD: exchange.method,
            sc.REQUEST_ID: exchange.request_id,
        }
        if call and call.operation:
            attributes[sc.GEN_AI_OPERATION_NAME] = call.operation
            attributes[sc.GEN_AI_PROVIDER_NAME] = self._provider_name
            attributes[sc.GEN_AI_REQUEST_STREAM] = call.stream
            if call.max_tokens is not None:
                attributes[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_tokens
            if call.temperature is not None:
                attributes[sc.GEN_AI_REQUEST_TEMPERATURE] = call.temperature
        context = trace.set_span_in_context(exchange.server_span)
        span = self._tracer.start_span(
            self._client_name(exchange), context, SpanKind.CLIENT, attributes
        )
        exchange.client_span = span
        return span

    def _client_name(self, exchange: Exchange) -> str:
        operation = exchange.operation
        if operation is None:
            return exchange.method
        route = exchange.route
        model = self._model_label.recorded(exchange.model) or (route.name if route else "")
        return f"{operation} {model}"

    def end(
        self,
        exchange: Exchange,
        timing: RequestTiming | None,
        t_end: float,
        content: dict[str, str],
    ) -> None:
        server, client = exchange.server_span, exchange.client_span
        status, kind = exchange.status, exchange.upstream_error_kind
        error_type = exchange.error_type or str(status)
        server.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, status)
        server.set_attribute(sc.OUTCOME_ATTR, exchange.outcome.value)
        overheads = {
            sc.OVERHEAD_REQUEST_S: exchange.request_overhead_s,
            sc.OVERHEAD_EVENT_S: exchange.event_overhead_s,
        }
        server.set_attributes({k: v for k, v in overheads.items() if v is not None})
        transport_failed = kind is not None and kind.transport
        if status >= 500 or transport_failed or exchange.outcome is Outcome.PROXY_ERROR:
            server.set_attribute(sc.ERROR_TYPE, error_type)
            server.set_status(Status(StatusCode.ERROR))
        if client is not None:
            model = self._model_label.recorded(exchange.model)
            if model is not None:
                client.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
                client.update_name(self._client_name(exchange))
            if timing is not None:
                self._timing_attributes(exchange, client, timing)
            if exchange.not_measured is not None:
                client.set_attribute(sc.NOT_MEASURED, exchange.not_measured)
            client.set_attributes(content)
            client.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, status)
            if status >= 400 or kind is not None:
                client.set_attribute(sc.ERROR_TYPE, error_type)
                client.set_status(Status(StatusCode.ERROR))
            client.end(exchange.wall_ns(t_end))
        server.end(exchange.wall_ns(t_end))

    def _timing_attributes(self, exchange: Exchange, span: Span, timing: RequestTiming) -> None:
        values = {
            sc.GEN_AI_RESPONSE_MODEL: timing.response_model,
            sc.GEN_AI_RESPONSE_ID: timing.response_id,
            sc.GEN_AI_USAGE_INPUT_TOKENS: timing.input_tokens,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: timing.output_tokens,
            sc.E2E_S: timing.e2e_s,
            sc.TTFT_S: timing.ttft_s,
            sc.TPOT_S: timing.tpot_s,
            sc.TIME_TO_FIRST_CHUNK_S: timing.time_to_first_chunk_s,
            **signal_attributes(timing),
        }
        if self._latest_gen_ai:
            values[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = timing.time_to_first_chunk_s
        span.set_attributes({key: value for key, value in values.items() if value is not None})
        if timing.finish_reasons:
            span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, timing.finish_reasons)
        if exchange.call and exchange.call.stream:
            span.set_attribute(sc.CHUNKS, timing.content_events)
            span.set_attribute(sc.TOKEN_SOURCE, timing.token_source.value)
            if timing.ttfnt_s:
                span.set_attribute(sc.TTFNT_N, list(timing.ttfnt_s))
                span.set_attribute(sc.TTFNT_S, list(timing.ttfnt_s.values()))
            if timing.ttft_s is not None:
                span.add_event(
                    sc.GEN_AI_FIRST_TOKEN_EVENT,
                    {sc.TTFT_S: timing.ttft_s},
                    exchange.wall0_ns + int(timing.ttft_s * 1e9),
                )


def signal_attributes(timing: RequestTiming) -> dict[str, Any]:
    """The server's signals (reasoning, cache, its own timings) and stalls, as attributes."""
    source = timing.reasoning_source
    return {
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: timing.cached_tokens,
        sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: timing.reasoning_tokens,
        sc.REASONING_SOURCE: source.value if source is not None else None,
        sc.ANSWER_TTFT_S: timing.answer_ttft_s,
        sc.REASONING_S: timing.reasoning_s,
        sc.SERVER_QUEUE_S: timing.server_queue_s,
        sc.SERVER_TTFT_S: timing.server_ttft_s,
        sc.SERVER_DECODE_S: timing.server_decode_s,
        sc.SERVER_ITL_S: timing.server_itl_s,
        sc.SPEC_ACCEPTANCE_RATE: timing.spec_acceptance_rate,
        sc.SPEC_ACCEPTANCE_LENGTH: timing.spec_acceptance_length,
        sc.MAX_ITL_S: timing.max_itl_s,
        sc.STALLS: timing.stalls,
    }
