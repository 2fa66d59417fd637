"""A span of the request as plain data while the request runs: its name, ids, attributes,
events and links. telemetry/ starts it (the sampler's decision, the ids) and hands it to the
span processors when it ends (tracing.py); until then it is only data the record holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind


@dataclass(slots=True)
class RequestSpan:
    """One span of a request, mutable until it ends; `recording` False when the sampler
    dropped it (its context still goes upstream, so the caller's decision carries on)."""

    name: str
    kind: SpanKind
    context: SpanContext
    parent: SpanContext | None
    start_ns: int
    attributes: dict[str, Any]
    recording: bool
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)  # to the call an agent's call continues
    failed: bool = False

    def as_parent(self) -> Context:
        """A context whose current span is this one: for a child, the propagator, exemplars."""
        return trace.set_span_in_context(NonRecordingSpan(self.context))
