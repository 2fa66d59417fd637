"""The proxy's spans: plain records while the request runs, handed to the span processors
as the SDK's ReadableSpan when they end, and only when a processor is there to take them.

The SDK's Span validates each attribute and takes a lock on every call: about 150 µs for a
request's two spans, a fifth of a short request's CPU. The proxy sets only attributes of its
own making (client text already clipped, numbers, strings and lists of them; fewer than the
128 attributes the SDK keeps by default), so they live in a dict until the end. What the
exporter sends is what the SDK would send: the sampler (`OTEL_TRACES_SAMPLER`), the ids and
the resource are the SDK's, a value length limit (`OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`,
`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) is applied as the SDK applies it, and
`OTEL_SDK_DISABLED=true` records nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from latency_proxy.record.span import RequestSpan

SCOPE = InstrumentationScope("latency_proxy")
_ERROR = Status(StatusCode.ERROR)
_UNSET = Status(StatusCode.UNSET)


class Tracing:
    """Starts and ends the proxy's spans and feeds the ended ones to its processors."""

    def __init__(
        self,
        resource: Resource,
        processors: Sequence[SpanProcessor] = (),
        env: Mapping[str, str] = os.environ,
    ) -> None:
        configured = TracerProvider(resource=resource, shutdown_on_exit=False)  # OTEL_* read
        self._sampler = configured.sampler
        self._ids = configured.id_generator
        self._random_ids = self._ids.is_trace_id_random()
        self._resource = resource
        self._processors = tuple(processors)
        self._enabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
        self._value_limit = SpanLimits().max_span_attribute_length

    @property
    def exporting(self) -> bool:
        return bool(self._processors)

    def start(
        self,
        name: str,
        parent: Context | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        start_ns: int,
    ) -> RequestSpan:
        """A span as the SDK's tracer would start it: the parent's trace or a new one, the
        sampler's decision, its attributes and trace state."""
        current = trace.get_current_span(parent).get_span_context()
        parent_context = current if current.is_valid else None
        if not self._enabled:
            context = parent_context or INVALID_SPAN_CONTEXT
            return RequestSpan(name, kind, context, parent_context, start_ns, {}, False)
        if parent_context is None:
            trace_id, random_id = self._ids.generate_trace_id(), self._random_ids
        else:
            trace_id = parent_context.trace_id
            random_id = parent_context.trace_flags.random_trace_id
        result = self._sampler.should_sample(parent, trace_id, name, kind, attributes)
        flags = TraceFlags.SAMPLED if result.decision.is_sampled() else TraceFlags.DEFAULT
        if random_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        context = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=TraceFlags(flags),
            trace_state=result.trace_state,
        )
        recording = result.decision.is_recording()
        kept = dict(result.attributes) if recording and result.attributes else {}
        return RequestSpan(name, kind, context, parent_context, start_ns, kept, recording)

    def end(self, span: RequestSpan, end_ns: int) -> None:
        """The span as a ReadableSpan to each processor; nothing is built with none."""
        if not span.recording or not self._processors:
            return
        attributes = span.attributes
        if self._value_limit is not None:
            attributes = {key: _limited(v, self._value_limit) for key, v in attributes.items()}
        ended = ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=self._resource,
            attributes=attributes,
            events=tuple(span.events),
            links=tuple(span.links),
            kind=span.kind,
            status=_ERROR if span.failed else _UNSET,
            start_time=span.start_ns,
            end_time=end_ns,
            instrumentation_scope=SCOPE,
        )
        for processor in self._processors:
            processor.on_end(ended)

    def shutdown(self, timeout_millis: int) -> None:
        """Flush what is queued, then stop the processors (their exporters' threads)."""
        for processor in self._processors:
            processor.force_flush(timeout_millis)
            processor.shutdown()


def _limited(value: Any, limit: int) -> Any:
    """A value cut as the SDK's BoundedAttributes cuts it: strings, and strings in a list."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list | tuple):
        return [item[:limit] if isinstance(item, str) else item for item in value]
    return value
