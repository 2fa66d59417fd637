"""The proxy's own spans against the SDK's: the same input gives the same OTLP spans, and the
sampler, the value length limit and OTEL_SDK_DISABLED act as they act in the SDK."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from latency_proxy.telemetry.tracing import SCOPE, Tracing

RESOURCE = Resource.create({"service.name": "latency-proxy"})
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SERVER_ATTRS = {"http.request.method": "POST", "url.path": "/v1/chat/completions"}
CLIENT_ATTRS = {"server.port": 8000, "gen_ai.request.stream": True}
CLOSING = {
    "http.response.status_code": 200,
    "gen_ai.response.finish_reasons": ["stop", "length"],
    "latency_proxy.ttfnt_s": [0.05, 0.07],
    "gen_ai.request.model": "llama-70b",
}
T0, T1, T2 = 1_700_000_000_000_000_000, 1_700_000_000_001_000_000, 1_700_000_000_090_000_000


def ours(env: dict[str, str] | None = None) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Tracing(RESOURCE, [SimpleSpanProcessor(exporter)], env or {}), exporter


def our_spans(tracing: Tracing, parent: str | None = PARENT):
    server = tracing.start(
        "POST /v1/chat/completions",
        extract({"traceparent": parent} if parent else {}),
        SpanKind.SERVER,
        dict(SERVER_ATTRS),
        T0,
    )
    client = tracing.start("chat x", server.as_parent(), SpanKind.CLIENT, dict(CLIENT_ATTRS), T1)
    return server, client


def test_spans_encode_as_the_sdks_would() -> None:
    """Everything but the generated span ids is the same protobuf: names (the CLIENT span's
    renamed at the end), kinds, parents, times, attributes, the first-token event, status."""
    tracing, exporter = ours()
    server, client = our_spans(tracing)
    client.name = "chat llama-70b"
    client.attributes.update(CLOSING)
    client.events.append(Event("gen_ai.first_token", {"latency_proxy.ttft_s": 0.05}, T1 + 5))
    server.attributes["http.response.status_code"] = 500
    server.failed = True
    tracing.end(client, T2)
    tracing.end(server, T2)

    sdk_exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(sdk_exporter))
    tracer = provider.get_tracer(SCOPE.name)
    sdk_server = tracer.start_span(
        "POST /v1/chat/completions",
        extract({"traceparent": PARENT}),
        SpanKind.SERVER,
        SERVER_ATTRS,
        start_time=T0,
    )
    sdk_client = tracer.start_span(
        "chat x", set_span_in_context(sdk_server), SpanKind.CLIENT, CLIENT_ATTRS, start_time=T1
    )
    sdk_client.update_name("chat llama-70b")
    sdk_client.set_attributes(CLOSING)
    sdk_client.add_event("gen_ai.first_token", {"latency_proxy.ttft_s": 0.05}, T1 + 5)
    sdk_server.set_attributes({"http.response.status_code": 500})
    sdk_server.set_status(Status(StatusCode.ERROR))
    sdk_client.end(T2)
    sdk_server.end(T2)

    def wire(spans) -> tuple[list, list]:
        encoded = encode_spans(spans)
        found = encoded.resource_spans[0].scope_spans[0].spans
        ids = [(s.trace_id, s.span_id, s.parent_span_id) for s in found]
        for span in found:
            span.span_id = span.parent_span_id = b""
        return [s.SerializeToString(deterministic=True) for s in found], ids

    (mine, my_ids), (sdk, sdk_ids) = (
        wire(exporter.get_finished_spans()),
        wire(sdk_exporter.get_finished_spans()),
    )
    assert mine == sdk
    (client_ids, server_ids) = my_ids
    assert server_ids[0] == bytes.fromhex(PARENT[3:35]) == client_ids[0]
    assert server_ids[2] == bytes.fromhex(PARENT[36:52])
    assert client_ids[2] == server_ids[1] != sdk_ids[1][1]
    assert encode_spans(exporter.get_finished_spans()).resource_spans[0].resource == (
        encode_spans(sdk_exporter.get_finished_spans()).resource_spans[0].resource
    )


def test_the_client_span_context_is_what_goes_upstream() -> None:
    tracing, _ = ours()
    server, client = our_spans(tracing)
    headers: dict[str, str] = {}
    inject(headers, client.as_parent())
    trace_id, span_id = (
        format(client.context.trace_id, "032x"),
        format(client.context.span_id, "016x"),
    )
    assert headers["traceparent"] == f"00-{trace_id}-{span_id}-01"
    assert trace_id == PARENT[3:35] and client.parent == server.context


@pytest.mark.parametrize(
    ("sampler", "parent", "recorded"),
    [
        ("always_off", PARENT, False),
        ("always_on", None, True),
        ("parentbased_always_off", PARENT, True),  # the caller sampled it: kept
        ("parentbased_always_off", None, False),
        ("parentbased_always_on", PARENT.replace("-01", "-00"), False),  # the caller dropped it
    ],
)
def test_the_sampler_decides_as_the_sdks_does(
    monkeypatch: pytest.MonkeyPatch, sampler: str, parent: str | None, recorded: bool
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    tracing, exporter = ours()
    server, client = our_spans(tracing, parent)
    assert server.context.trace_flags.sampled is recorded
    assert client.context.trace_flags.sampled is recorded
    tracing.end(client, T2)
    tracing.end(server, T2)
    assert len(exporter.get_finished_spans()) == (2 if recorded else 0)


def test_the_value_length_limit_cuts_strings_as_the_sdk_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "3")
    tracing, exporter = ours()
    server, _ = our_spans(tracing, None)
    server.attributes.update({"words": ["stop", "ok"], "n": 123456, "f": 0.123456})
    tracing.end(server, T2)
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes) == {
        "http.request.method": "POS",
        "url.path": "/v1",
        "words": ["sto", "ok"],
        "n": 123456,
        "f": 0.123456,
    }


def test_sdk_disabled_records_nothing_and_passes_the_callers_context_on() -> None:
    tracing, exporter = ours({"OTEL_SDK_DISABLED": "true"})
    server, client = our_spans(tracing)
    assert not server.recording and not client.recording
    headers: dict[str, str] = {}
    inject(headers, client.as_parent())
    assert headers["traceparent"] == PARENT
    tracing.end(client, T2)
    tracing.end(server, T2)
    assert exporter.get_finished_spans() == ()
