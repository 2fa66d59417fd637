"""The own OTLP encoding against the SDK's: the same spans give the same bytes, for every
field a span can carry; and the exporter that sends them finds what it needs on the
installed SDK exporter, or steps aside for it."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    SpanKind,
    Status,
    StatusCode,
    get_current_span,
    set_span_in_context,
)

from latency_proxy.telemetry import otlp_http
from latency_proxy.telemetry.otlp_encoding import encode_spans

VALUES = {
    "text": "POST",
    "unicode": "模型 ✓",
    "long": "x" * 300,  # a length past one varint byte
    "empty": "",
    "yes": True,
    "no": False,
    "zero": 0,
    "count": 123_456_789_012,
    "negative": -42,
    "ratio": 0.25,
    "nan-free-zero": 0.0,
    "negative-float": -1e-9,
    "words": ["stop", "length"],
    "flags": [True, False],
    "numbers": [1, -2, 3],
    "floats": [0.05, 0.07],
    "nothing": [],
}


RESOURCE = Resource.create({"service.name": "latency-proxy"})


def finished(
    resource: Resource = RESOURCE,
    limits: SpanLimits | None = None,
    scope: tuple[str, str | None] = ("latency_proxy", None),
) -> tuple[TracerProvider, InMemorySpanExporter, object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource, span_limits=limits, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter, provider.get_tracer(*scope)


REMOTE_PARENT = {  # a caller's context with a two-member trace state
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=a1,other=b",
}


def assert_same_bytes(spans) -> None:
    assert encode_spans(spans) == sdk_encode(spans).SerializePartialToString()


@pytest.mark.parametrize("kind", list(SpanKind))
def test_every_kind_and_value_type_encodes_as_the_sdk_does(kind: SpanKind) -> None:
    _, exporter, tracer = finished()
    span = tracer.start_span("op", kind=kind, attributes=VALUES, start_time=10**18)
    span.add_event("gen_ai.first_token", {"latency_proxy.ttft_s": 0.05}, timestamp=10**18 + 5)
    span.add_event("bare")
    span.end(10**18 + 90)
    assert_same_bytes(exporter.get_finished_spans())


@pytest.mark.parametrize(
    "status",
    [Status(StatusCode.ERROR), Status(StatusCode.ERROR, "upstream reset"), Status(StatusCode.OK)],
    ids=["error", "error-described", "ok"],
)
def test_status_parents_and_trace_state_encode_as_the_sdk_does(status: Status) -> None:
    _, exporter, tracer = finished()
    server = tracer.start_span("server", extract(REMOTE_PARENT), SpanKind.SERVER)
    assert len(server.get_span_context().trace_state) == 2
    client = tracer.start_span("client", set_span_in_context(server), SpanKind.CLIENT)
    client.set_status(status)
    client.end()
    server.end()
    root = tracer.start_span("root")  # no parent at all
    root.end()
    assert_same_bytes(exporter.get_finished_spans())


def test_links_to_local_and_remote_calls_encode_as_the_sdk_does() -> None:
    """An agent's call links to the call it continues (telemetry/sessions.py)."""
    limits = SpanLimits(max_link_attributes=1)
    _, exporter, tracer = finished(limits=limits)
    earlier = tracer.start_span("chat m")
    earlier.end()
    remote = get_current_span(extract(REMOTE_PARENT)).get_span_context()
    links = [
        Link(earlier.get_span_context(), {"latency_proxy.session.parent": "req-1"}),
        Link(remote, {"a": 1, "b": 2}),  # one attribute dropped
        Link(remote),
    ]
    span = tracer.start_span("chat m", links=links)
    span.end()
    assert_same_bytes(exporter.get_finished_spans())


def test_dropped_attributes_and_events_are_counted_as_the_sdk_counts_them() -> None:
    limits = SpanLimits(max_span_attributes=3, max_events=1, max_event_attributes=1)
    _, exporter, tracer = finished(limits=limits)
    span = tracer.start_span("op", attributes=VALUES)
    span.add_event("one")
    span.add_event("two", {"a": 1, "b": 2})  # the one kept
    span.end()
    (ended,) = exporter.get_finished_spans()
    assert ended.dropped_attributes and ended.dropped_events
    assert ended.events[0].dropped_attributes
    assert_same_bytes([ended])


def test_a_batch_groups_spans_by_resource_and_scope_as_the_sdk_does() -> None:
    first = finished(scope=("latency_proxy", "1.0"))
    second = finished(Resource.create({"service.name": "other", "host.name": "h"}))
    spans = []
    for _, exporter, tracer in (first, second, first):
        for name in ("a", "b"):
            tracer.start_span(name, attributes={"n": len(spans)}).end()
        spans.extend(exporter.get_finished_spans()[-2:])
    assert_same_bytes(spans)


def test_a_value_it_does_not_know_is_an_error_naming_only_its_type() -> None:
    _, exporter, tracer = finished()
    tracer.start_span("op").end()
    (span,) = exporter.get_finished_spans()
    span._attributes = {"prompt": object()}  # past the SDK's checks, as a bug would be
    with pytest.raises(TypeError, match=r"^attribute value of type object$"):
        encode_spans([span])


def test_the_installed_sdk_exporter_has_what_the_own_encoding_needs() -> None:
    exporter = otlp_http.span_exporter()
    assert type(exporter) is otlp_http.OwnEncodingSpanExporter, (
        f"the installed OTLPSpanExporter lacks one of {otlp_http.PRIVATE_FIELDS}"
    )


def test_without_those_fields_the_sdk_exporter_is_used_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(otlp_http, "PRIVATE_FIELDS", (*otlp_http.PRIVATE_FIELDS, "_renamed"))
    assert type(otlp_http.span_exporter()) is OTLPSpanExporter
