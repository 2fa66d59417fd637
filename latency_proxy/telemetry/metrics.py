"""A model call's metric observations: counted in flight while it runs, then one request
count and its figures (telemetry/instruments.py defines the instruments, DESIGN.md the figures)."""

from __future__ import annotations

from opentelemetry import trace

from latency_proxy.coalescing import buffered
from latency_proxy.exchange import Exchange
from latency_proxy.meter import RequestTiming
from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.providers import Telemetry


class MetricsWriter:
    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry
        self._model_label = telemetry.model_label

    def labels(self, exchange: Exchange) -> tuple[str, str, str]:
        """operation, model, route: the labels every per-request instrument carries."""
        route = exchange.route
        return (
            exchange.operation or "",
            self._model_label.recorded(exchange.model) or "",
            route.name if route else "",
        )

    def admitted(self, exchange: Exchange) -> None:
        """The request will be sent upstream: count it in flight."""
        exchange.active_labels = self.labels(exchange)
        self._telemetry.instrument(ins.ACTIVE).record(1, exchange.active_labels)

    def ended(self, exchange: Exchange) -> None:
        """The request's last byte is out: no longer in flight, now rather than when its
        record is written (records are written one per loop turn, and a burst of short
        answers would otherwise read as more requests in flight than there are)."""
        if exchange.active_labels is not None:
            self._telemetry.instrument(ins.ACTIVE).record(-1, exchange.active_labels)
            exchange.active_labels = None

    def not_retried(self, route: str, method: str) -> None:
        """A request the upstream may have run, left to fail rather than sent twice; any
        request, not only model calls (a POST that loads an adapter counts too)."""
        self._telemetry.instrument(ins.NOT_RETRIED).record(1, (route, method))

    def record(self, exchange: Exchange, timing: RequestTiming | None, trace_id: str) -> None:
        tel = self._telemetry
        labels = self.labels(exchange)
        outcome = exchange.outcome.value
        tel.instrument(ins.REQUESTS).record(1, (*labels, str(exchange.status), outcome))
        kind = exchange.upstream_error_kind
        if kind is not None:
            tel.instrument(ins.UPSTREAM_ERRORS).record(1, (*labels, kind.value))
        if exchange.oversized_events:
            tel.instrument(ins.OVERSIZED_EVENTS).record(exchange.oversized_events, labels)
        if timing is None:
            return
        context = trace.set_span_in_context(exchange.client_span or exchange.server_span)

        def observe(spec: ins.Spec, value: float | None, *extra: str) -> None:
            if value is not None:
                tel.instrument(spec).record(value, (*labels, *extra), trace_id, context)

        latest = tel.latest_gen_ai
        observe(ins.DURATION, timing.e2e_s)
        if latest:
            observe(ins.INFERENCE_INPUT_TOKENS, timing.input_tokens)
            observe(ins.INFERENCE_OUTPUT_TOKENS, timing.output_tokens)
            observe(ins.USAGE_INPUT_TOKENS, timing.input_tokens)
            observe(ins.USAGE_OUTPUT_TOKENS, timing.output_tokens)
            observe(ins.USAGE_CACHE_READ_TOKENS, timing.cached_tokens)
            observe(ins.USAGE_REASONING_TOKENS, timing.reasoning_tokens)
        else:
            observe(ins.TOKEN_USAGE, timing.input_tokens, "input")
            observe(ins.TOKEN_USAGE, timing.output_tokens, "output")
        observe(ins.REASONING_TOKENS, timing.reasoning_tokens)
        if timing.cached_tokens is not None and timing.input_tokens:
            observe(ins.CACHED_FRACTION, min(1.0, timing.cached_tokens / timing.input_tokens))
        observe(ins.OVERHEAD, exchange.request_overhead_s, "request")
        observe(ins.OVERHEAD, exchange.event_overhead_s, "event")
        if not (exchange.call and exchange.call.stream):
            return
        first_chunk = ins.INFERENCE_TIME_TO_FIRST_CHUNK if latest else ins.TIME_TO_FIRST_CHUNK
        observe(first_chunk, timing.time_to_first_chunk_s)
        observe(ins.TTFT, timing.ttft_s)
        observe(ins.ANSWER_TTFT, timing.answer_ttft_s)
        observe(ins.TPOT, timing.tpot_s)
        for n, seconds in timing.ttfnt_s.items():
            observe(ins.TIME_TO_FIRST_N_TOKENS, seconds, str(n))
        per_chunk = ins.INFERENCE_TIME_PER_OUTPUT_CHUNK if latest else ins.TIME_PER_OUTPUT_CHUNK
        tel.instrument(per_chunk).record_all(timing.itl_s, labels, trace_id, context)
        if timing.stalls:
            tel.instrument(ins.STALLS).record(timing.stalls, labels)
        tel.instrument(ins.TOKENS_PER_CHUNK).record_all(
            timing.tokens_per_chunk, labels, None, context
        )
        if buffered(timing.coalesced_fraction):
            tel.instrument(ins.COALESCED_STREAMS).record(1, labels)
