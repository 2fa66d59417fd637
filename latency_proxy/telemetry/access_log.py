"""The one log line per request (logger latency_proxy.access; keys in DESIGN.md)."""

from __future__ import annotations

import logging

from latency_proxy.exchange import Exchange
from latency_proxy.meter import RequestTiming
from latency_proxy.redact import ContentPolicy
from latency_proxy.telemetry import semconv as sc
from latency_proxy.telemetry.logs import MAX_RECORDED_CHARS, clip, escape
from latency_proxy.telemetry.providers import ModelLabels

log = logging.getLogger("latency_proxy.access")


class LogWriter:
    def __init__(self, model_label: ModelLabels, policy: ContentPolicy | None = None) -> None:
        self._model_label = model_label
        self._policy = policy

    def write(
        self,
        exchange: Exchange,
        timing: RequestTiming | None,
        t_end: float,
        content: dict[str, str],
    ) -> None:
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
            "e2e_s": round(t_end - exchange.t0, 6),
        }
        if len(exchange.path) > MAX_RECORDED_CHARS:
            fields["path_length"] = len(exchange.path)
        if exchange.not_measured is not None:
            fields["not_measured"] = exchange.not_measured
        if timing is not None:
            fields.update(
                ttft_s=timing.ttft_s,
                tpot_s=timing.tpot_s,
                time_to_first_chunk_s=timing.time_to_first_chunk_s,
                input_tokens=timing.input_tokens,
                output_tokens=timing.output_tokens,
                chunks=timing.content_events,
                coalesced_fraction=timing.coalesced_fraction,
                invalid_events=timing.invalid_events,
                finish_reasons=timing.finish_reasons or None,
                answer_ttft_s=timing.answer_ttft_s,
                reasoning_s=timing.reasoning_s,
                reasoning_tokens=timing.reasoning_tokens,
                reasoning_source=source.value if (source := timing.reasoning_source) else None,
                cached_tokens=timing.cached_tokens,
                server_queue_s=timing.server_queue_s,
                server_ttft_s=timing.server_ttft_s,
                server_decode_s=timing.server_decode_s,
                server_itl_s=timing.server_itl_s,
                spec_acceptance_rate=timing.spec_acceptance_rate,
                spec_acceptance_length=timing.spec_acceptance_length,
                max_itl_s=timing.max_itl_s,
                stalls=timing.stalls,
            )
        if self._policy is not None and exchange.input_texts:
            hashes = self._policy.prefix_hashes(exchange.input_texts)
            if hashes:
                fields["prefix_hashes"] = hashes
        if content:
            fields.update(
                input_messages=content.get(sc.GEN_AI_INPUT_MESSAGES),
                output_messages=content.get(sc.GEN_AI_OUTPUT_MESSAGES),
            )
        level = logging.INFO if exchange.outcome.routine else logging.WARNING
        log.log(level, "request", extra={"fields": fields})
