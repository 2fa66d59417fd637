"""The request's spans: a SERVER span for what the client asked, a CLIENT span for the
call upstream (GenAI semantic conventions), both ended with the exchange's figures."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, SpanKind

from latency_proxy.base import semconv as sc
from latency_proxy.base.asgi import Scope
from latency_proxy.base.config import Route
from latency_proxy.measure.meter import RequestTiming
from latency_proxy.record.exchange import Exchange, Finished
from latency_proxy.record.outcome import Outcome
from latency_proxy.record.session import Placement
from latency_proxy.record.span import RequestSpan
from latency_proxy.telemetry.logs import MAX_RECORDED_CHARS, clip
from latency_proxy.telemetry.providers import Telemetry


class SpanWriter:
    def __init__(self, telemetry: Telemetry) -> None:
        self._tracing = telemetry.tracing
        self._provider_name = telemetry.provider_name
        self._model_label = telemetry.model_label
        self._latest_gen_ai = telemetry.latest_gen_ai
        # a CLIENT span's attributes that only its route decides, built once per route
        self._route_attributes: dict[tuple[str, bool], dict[str, Any]] = {}

    def start_server(
        self, scope: Scope, request_id: str, measured: bool, parent: Context, wall0_ns: int
    ) -> RequestSpan:
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
        return self._tracing.start(name, parent, SpanKind.SERVER, attributes, wall0_ns)

    def start_client(self, exchange: Exchange) -> RequestSpan:
        """The upstream call's span, a child of the SERVER span, kept on the exchange."""
        call, route = exchange.call, exchange.route
        assert route is not None
        model_call = bool(call and call.operation)
        attributes = dict(self._for_route(route, model_call))
        attributes[sc.HTTP_REQUEST_METHOD] = exchange.method
        attributes[sc.REQUEST_ID] = exchange.request_id
        if call and call.operation:
            attributes[sc.GEN_AI_OPERATION_NAME] = call.operation
            attributes[sc.GEN_AI_REQUEST_STREAM] = call.stream
            if call.max_tokens is not None:
                attributes[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_tokens
            if call.temperature is not None:
                attributes[sc.GEN_AI_REQUEST_TEMPERATURE] = call.temperature
        span = self._tracing.start(
            self._client_name(exchange),
            exchange.server_span.as_parent(),
            SpanKind.CLIENT,
            attributes,
            time.time_ns(),
        )
        exchange.client_span = span
        return span

    def _for_route(self, route: Route, model_call: bool) -> dict[str, Any]:
        """The attributes every CLIENT span of this route starts with, in the order a span
        lists them (server address and port; the provider, for a model call)."""
        key = (route.name, model_call)
        found = self._route_attributes.get(key)
        if found is None:
            found = {sc.SERVER_ADDRESS: route.host, sc.SERVER_PORT: route.port}
            if model_call:
                found[sc.GEN_AI_PROVIDER_NAME] = self._provider_name
            self._route_attributes[key] = found
        return found

    def _client_name(self, exchange: Exchange) -> str:
        operation = exchange.operation
        if operation is None:
            return exchange.method
        route = exchange.route
        model = self._model_label.recorded(exchange.model) or (route.name if route else "")
        return f"{operation} {model}"

    def end(self, done: Finished) -> None:
        """Each span's closing attributes and status, then its end at the exchange's last
        byte."""
        exchange, timing = done.exchange, done.timing
        if not self._tracing.exporting:
            return  # the contexts went upstream and into the log line; nothing takes the rest
        server, client = exchange.server_span, exchange.client_span
        status, kind = exchange.status, exchange.upstream_error_kind
        error_type = exchange.error_type or str(status)
        closing: dict[str, Any] = {
            sc.HTTP_RESPONSE_STATUS_CODE: status,
            sc.OUTCOME_ATTR: exchange.outcome.value,
        }
        if exchange.request_overhead_s is not None:
            closing[sc.OVERHEAD_REQUEST_S] = exchange.request_overhead_s
        if exchange.event_overhead_s is not None:
            closing[sc.OVERHEAD_EVENT_S] = exchange.event_overhead_s
        if exchange.loop_lag_max_s is not None:
            closing[sc.LOOP_LAG_MAX_S] = exchange.loop_lag_max_s
        transport_failed = kind is not None and kind.transport
        failed = status >= 500 or transport_failed or exchange.outcome is Outcome.PROXY_ERROR
        if failed:
            closing[sc.ERROR_TYPE] = error_type
        server.attributes.update(closing)
        server.failed = failed
        end_ns = exchange.wall_ns(done.t_end)
        if client is not None:
            attributes = client.attributes
            model = self._model_label.recorded(exchange.model)
            if model is not None:
                attributes[sc.GEN_AI_REQUEST_MODEL] = model
                client.name = self._client_name(exchange)
            if timing is not None:
                self._timing_attributes(exchange, client, timing, attributes)
            if exchange.not_measured is not None:
                attributes[sc.NOT_MEASURED] = exchange.not_measured
            attributes.update(done.content)
            if exchange.placement is not None:
                _session_attributes(exchange.placement, client)
            attributes[sc.HTTP_RESPONSE_STATUS_CODE] = status
            if status >= 400 or kind is not None:
                attributes[sc.ERROR_TYPE] = error_type
                client.failed = True
            self._tracing.end(client, end_ns)
        self._tracing.end(server, end_ns)

    def _timing_attributes(
        self, exchange: Exchange, span: RequestSpan, timing: RequestTiming, into: dict[str, Any]
    ) -> None:
        """The meter's figures as CLIENT span attributes (TIMING_ATTRIBUTES), and the
        first-token event."""
        stream = bool(exchange.call and exchange.call.stream)
        for key, value, streamed_only in TIMING_ATTRIBUTES:
            if stream or not streamed_only:
                found = value(timing)
                if found is not None:
                    into[key] = found
        if self._latest_gen_ai and timing.time_to_first_chunk_s is not None:
            into[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = timing.time_to_first_chunk_s
        if stream and timing.ttft_s is not None:
            at = exchange.wall0_ns + int(timing.ttft_s * 1e9)
            span.events.append(Event(sc.GEN_AI_FIRST_TOKEN_EVENT, {sc.TTFT_S: timing.ttft_s}, at))


def _session_attributes(placement: Placement, span: RequestSpan) -> None:
    """Where an agent's call stands (SESSION_ATTRIBUTES), and a link to the call it continues."""
    for key, value in SESSION_ATTRIBUTES:
        found = value(placement)
        if found is not None:
            span.attributes[key] = found
    if placement.parent_span is not None:
        span.links.append(Link(placement.parent_span, {sc.SESSION_PARENT: placement.parent}))


SESSION_ATTRIBUTES: tuple[tuple[str, Callable[[Placement], Any]], ...] = (
    (sc.GEN_AI_CONVERSATION_ID, lambda p: p.session),
    (sc.SESSION_JOINED_BY, lambda p: p.joined_by),
    (sc.SESSION_TURN, lambda p: p.turn),
    (sc.SESSION_PARENT, lambda p: p.parent),
    (sc.SESSION_PARENT_GAP_S, lambda p: p.parent_gap_s),
    (sc.SESSION_TOOLS_ASKED, lambda p: p.tools_asked),
    (sc.SESSION_TOOLS_ANSWERED, lambda p: p.tools_answered),
    (sc.SESSION_PROMPT_BLOCKS, lambda p: len(p.prefix_blocks)),
)

# (attribute, its value from the meter's figures or None for none, streamed answers only)
TIMING_ATTRIBUTES: tuple[tuple[str, Callable[[RequestTiming], Any], bool], ...] = (
    (sc.GEN_AI_RESPONSE_MODEL, lambda t: t.response_model, False),
    (sc.GEN_AI_RESPONSE_ID, lambda t: t.response_id, False),
    (sc.GEN_AI_USAGE_INPUT_TOKENS, lambda t: t.input_tokens, False),
    (sc.GEN_AI_USAGE_OUTPUT_TOKENS, lambda t: t.output_tokens, False),
    (sc.E2E_S, lambda t: t.e2e_s, False),
    (sc.TTFT_S, lambda t: t.ttft_s, False),
    (sc.TPOT_S, lambda t: t.tpot_s, False),
    (sc.TIME_TO_FIRST_CHUNK_S, lambda t: t.time_to_first_chunk_s, False),
    (sc.GEN_AI_RESPONSE_FINISH_REASONS, lambda t: t.finish_reasons or None, False),
    # the server's signals (reasoning, cache, its own timings) and stalls
    (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, lambda t: t.cached_tokens, False),
    (sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, lambda t: t.reasoning_tokens, False),
    (sc.REASONING_SOURCE, lambda t: t.reasoning_source_value, False),
    (sc.ANSWER_TTFT_S, lambda t: t.answer_ttft_s, False),
    (sc.REASONING_S, lambda t: t.reasoning_s, False),
    (sc.SERVER_QUEUE_S, lambda t: t.server_queue_s, False),
    (sc.SERVER_TTFT_S, lambda t: t.server_ttft_s, False),
    (sc.SERVER_DECODE_S, lambda t: t.server_decode_s, False),
    (sc.SERVER_ITL_S, lambda t: t.server_itl_s, False),
    (sc.SPEC_ACCEPTANCE_RATE, lambda t: t.spec_acceptance_rate, False),
    (sc.SPEC_ACCEPTANCE_LENGTH, lambda t: t.spec_acceptance_length, False),
    (sc.MAX_ITL_S, lambda t: t.max_itl_s, False),
    (sc.STALLS, lambda t: t.stalls, False),
    (sc.CHUNKS, lambda t: t.content_events, True),
    (sc.TOKEN_SOURCE, lambda t: t.token_source.value, True),
    (sc.TTFNT_N, lambda t: list(t.ttfnt_s) or None, True),
    (sc.TTFNT_S, lambda t: list(t.ttfnt_s.values()) or None, True),
)
