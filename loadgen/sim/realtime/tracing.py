"""vLLM's `llm_request` span, exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.

Like vLLM (vllm/v1/engine/output_processor.py), the span is a SERVER span that continues the
incoming `traceparent`, starts at the request's arrival, ends when it finishes, and carries
the `gen_ai.latency.*` figures. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks grpc or
http/protobuf (the default); OTEL_SERVICE_NAME names the service (default loadgen-sim).
The provider is private to the app, so a proxy under test in the same process keeps its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from loadgen.sim.model.sequence import Seq

_PROPAGATOR = TraceContextTextMapPropagator()


def provider_from_env() -> TracerProvider | None:
    env = os.environ
    if not any(env.get(f"OTEL_EXPORTER_OTLP_{k}ENDPOINT") for k in ("TRACES_", "")):
        return None
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    exporter: SpanExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http import trace_exporter

        exporter = trace_exporter.OTLPSpanExporter()
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "loadgen-sim"}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class RequestTracer:
    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("loadgen.sim")

    def record(
        self,
        headers: Mapping[str, str],
        seq: Seq,
        *,
        request_id: str,
        model: str,
        params: Mapping[str, Any],
    ) -> None:
        """One finished request. `params`: max_tokens, temperature, top_p, n as sent."""
        assert seq.finished_at is not None and seq.first_token_at is not None
        scheduled, queued = seq.scheduled_at, seq.queued_at
        assert scheduled is not None and queued is not None  # stamped by whatever ran it
        attributes: dict[str, Any] = {
            "gen_ai.response.model": model,
            "gen_ai.request.id": request_id,
            "gen_ai.usage.prompt_tokens": seq.prompt_tokens,
            "gen_ai.usage.completion_tokens": seq.generated,
            "gen_ai.latency.time_in_queue": scheduled - queued,
            "gen_ai.latency.time_to_first_token": seq.first_token_at - seq.arrival,
            "gen_ai.latency.e2e": seq.finished_at - seq.arrival,
            "gen_ai.latency.time_in_model_prefill": seq.first_token_at - scheduled,
            "gen_ai.latency.time_in_model_decode": seq.finished_at - seq.first_token_at,
            "gen_ai.latency.time_in_model_inference": seq.finished_at - scheduled,
        }
        for key, value in params.items():
            if value is not None:
                attributes[f"gen_ai.request.{key}"] = value
        span = self._tracer.start_span(
            "llm_request",
            context=_PROPAGATOR.extract(headers),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=_wall_ns(seq.arrival),
        )
        span.end(end_time=_wall_ns(seq.finished_at))

    def shutdown(self) -> None:
        self._provider.shutdown()


def _wall_ns(monotonic: float) -> int:
    return time.time_ns() - int((time.monotonic() - monotonic) * 1e9)
