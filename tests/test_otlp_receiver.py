"""The test OTLP receiver, fed by the real OTel SDK exporters over both transports."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.grpc import _log_exporter as grpc_logs
from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as grpc_metrics
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as grpc_traces
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http import _log_exporter as http_logs
from opentelemetry.exporter.otlp.proto.http import metric_exporter as http_metrics
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_traces
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.support.otlp_receiver import OTLPReceiver

PROTOCOLS = ["http/protobuf", "grpc"]
EXPORTERS = {
    "http/protobuf": (
        http_traces.OTLPSpanExporter,
        http_metrics.OTLPMetricExporter,
        http_logs.OTLPLogExporter,
    ),
    "grpc": (
        grpc_traces.OTLPSpanExporter,
        grpc_metrics.OTLPMetricExporter,
        grpc_logs.OTLPLogExporter,
    ),
}
RESOURCE = Resource.create({"service.name": "receiver-test"})


@pytest.fixture
def rx():
    with OTLPReceiver() as receiver:
        yield receiver


@pytest.fixture(params=PROTOCOLS)
def protocol(request, rx, monkeypatch) -> str:
    """Point the SDK's exporters at `rx` the way the proxy is configured: via OTEL_* variables."""
    endpoint = rx.endpoint if request.param == "http/protobuf" else rx.grpc_endpoint
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", request.param)
    return request.param


def tracer_provider(exporter) -> TracerProvider:
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_spans_are_decoded(rx, protocol):
    provider = tracer_provider(EXPORTERS[protocol][0]())
    tracer = provider.get_tracer("test.scope")
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as server:
        with tracer.start_as_current_span("chat llama-70b", kind=SpanKind.CLIENT) as client:
            client.set_attributes(
                {
                    "gen_ai.request.model": "llama-70b",
                    "gen_ai.usage.output_tokens": 42,
                    "latency_proxy.ttft_s": 0.25,
                    "gen_ai.request.stream": True,
                    "gen_ai.response.finish_reasons": ("stop", "length"),
                }
            )
            client.add_event("gen_ai.first_token", {"n": 1})
            client.set_status(Status(StatusCode.ERROR, "upstream 500"))
        server.set_status(Status(StatusCode.OK))
    provider.shutdown()

    spans = rx.wait_for_spans(lambda spans: len(spans) == 2, timeout=5)
    by_kind = {s.kind: s for s in spans}
    root, child = by_kind["SERVER"], by_kind["CLIENT"]
    assert root.name == "POST /v1/chat/completions"
    assert root.parent_span_id == ""
    assert root.status_code == "OK"
    assert child.parent_span_id == root.span_id
    assert child.trace_id == root.trace_id == format(server.get_span_context().trace_id, "032x")
    assert child.span_id == format(client.get_span_context().span_id, "016x")
    assert child.attributes == {
        "gen_ai.request.model": "llama-70b",
        "gen_ai.usage.output_tokens": 42,
        "latency_proxy.ttft_s": 0.25,
        "gen_ai.request.stream": True,
        "gen_ai.response.finish_reasons": ["stop", "length"],
    }
    assert child.events == [("gen_ai.first_token", {"n": 1})]
    assert (child.status_code, child.status_message) == ("ERROR", "upstream 500")
    assert child.resource["service.name"] == "receiver-test"
    assert child.scope == "test.scope"
    assert root.start_ns <= child.start_ns < child.end_ns <= root.end_ns


def test_metrics_are_decoded_with_exemplars(rx, protocol):
    reader = PeriodicExportingMetricReader(EXPORTERS[protocol][1](), export_interval_millis=60_000)
    meters = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = meters.get_meter("test.scope")
    ttft = meter.create_histogram(
        "gen_ai.server.time_to_first_token",
        unit="s",
        explicit_bucket_boundaries_advisory=[0.1, 0.5, 1.0],
    )
    requests = meter.create_counter("latency_proxy.requests")
    active = meter.create_up_down_counter("latency_proxy.requests.active")
    tracer = tracer_provider(EXPORTERS[protocol][0]()).get_tracer("test.scope")

    with tracer.start_as_current_span("request") as span:
        ttft.record(0.3, {"gen_ai.request.model": "m"})  # sampled span: carries an exemplar
    ttft.record(0.05, {"gen_ai.request.model": "m"})
    ttft.record(2.0, {"gen_ai.request.model": "m"})
    requests.add(3, {"outcome": "ok"})
    active.add(1)
    meters.shutdown()  # exports once

    points = rx.wait_for_metrics(lambda ps: len(ps) >= 3, timeout=5)
    by_name = {p.name: p for p in points}
    hist = by_name["gen_ai.server.time_to_first_token"]
    assert (hist.kind, hist.unit) == ("histogram", "s")
    assert hist.attributes == {"gen_ai.request.model": "m"}
    assert hist.count == 3
    assert hist.sum == pytest.approx(2.35)
    assert hist.explicit_bounds == (0.1, 0.5, 1.0)
    assert hist.bucket_counts == (1, 1, 0, 1)
    traced = [e for e in hist.exemplars if e.trace_id]
    assert [e.value for e in traced] == [0.3]
    assert traced[0].trace_id == format(span.get_span_context().trace_id, "032x")
    assert traced[0].span_id == format(span.get_span_context().span_id, "016x")
    counter = by_name["latency_proxy.requests"]
    assert (counter.kind, counter.value, counter.attributes) == ("sum", 3, {"outcome": "ok"})
    active_point = by_name["latency_proxy.requests.active"]
    assert (active_point.kind, active_point.value) == ("sum", 1)
    assert hist.resource["service.name"] == "receiver-test"


def test_logs_are_decoded(rx, protocol):
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(EXPORTERS[protocol][2]()))
    tracer = tracer_provider(EXPORTERS[protocol][0]()).get_tracer("t")
    with tracer.start_as_current_span("request") as span:
        provider.get_logger("test.scope").emit(
            body="upstream slow", severity_text="WARN", attributes={"request_id": "req-1"}
        )
    provider.shutdown()

    [record] = rx.logs()
    assert (record.body, record.severity_text) == ("upstream slow", "WARN")
    assert record.attributes == {"request_id": "req-1"}
    assert record.trace_id == format(span.get_span_context().trace_id, "032x")
    assert record.resource["service.name"] == "receiver-test"


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_raw_payloads_expose_every_byte_sent(rx, compression):
    """A canary put in a span is found in raw_payloads, even when the exporter gzips."""
    canary = "CANARY-7f3a9c-do-not-export"
    exporter = http_traces.OTLPSpanExporter(
        endpoint=f"{rx.endpoint}/v1/traces", compression=compression
    )
    provider = tracer_provider(exporter)
    with provider.get_tracer("t").start_as_current_span("span") as span:
        span.set_attribute("prompt", canary)
    provider.shutdown()

    assert rx.request_count == 1
    assert any(canary.encode() in body for body in rx.raw_payloads())


@pytest.mark.parametrize("transport", PROTOCOLS)
def test_failing_refuses_and_counts(rx, transport):
    make = EXPORTERS[transport][0]
    if transport == "grpc":
        exporter = make(endpoint=rx.grpc_endpoint, timeout=0.5)
    else:
        exporter = make(endpoint=f"{rx.endpoint}/v1/traces", timeout=0.5)
    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("lost") as lost:
        pass
    with tracer.start_as_current_span("kept") as kept:
        pass

    rx.set_failing(True)
    assert exporter.export([lost]) is SpanExportResult.FAILURE
    refused = rx.request_count
    assert refused >= 1
    assert rx.spans() == []
    assert len(rx.raw_payloads()) == refused

    rx.set_failing(False)
    assert exporter.export([kept]) is SpanExportResult.SUCCESS
    assert rx.request_count == refused + 1
    assert [s.name for s in rx.spans()] == ["kept"]
    exporter.shutdown()


def test_wait_for_spans_times_out_with_a_summary(rx):
    provider = tracer_provider(http_traces.OTLPSpanExporter(endpoint=f"{rx.endpoint}/v1/traces"))
    with provider.get_tracer("t").start_as_current_span("only-span"):
        pass
    provider.shutdown()

    with pytest.raises(AssertionError, match=r"(?s)1 span\(s\).*'only-span'"):
        rx.wait_for_spans(lambda spans: len(spans) > 1, timeout=0.2)


def test_http_rejects_unknown_paths_and_garbage(rx):
    def post(path: str, body: bytes) -> int:
        request = urllib.request.Request(f"{rx.endpoint}{path}", data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post("/v1/profiles", b"") == 404
    assert post("/v1/traces", b"\xff\xff\xff") == 400
    assert post("/v1/traces", b"") == 200  # an empty export request is valid protobuf
    assert rx.request_count == 2


@pytest.mark.anyio
async def test_async_usage_does_not_block_the_loop():
    async with OTLPReceiver() as receiver:
        provider = tracer_provider(
            http_traces.OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
        )
        with provider.get_tracer("t").start_as_current_span("async-span"):
            pass
        spans = await receiver.await_spans(lambda spans: len(spans) == 1, timeout=5)
        provider.shutdown()
    assert [s.name for s in spans] == ["async-span"]


def test_stop_closes_open_keep_alive_connections():
    """After stop(), an exporter's pooled connection must fail, as with a real collector."""
    receiver = OTLPReceiver().start()
    connection = http.client.HTTPConnection(receiver.endpoint.removeprefix("http://"), timeout=5)
    try:
        connection.request("POST", "/v1/traces", body=b"")
        assert connection.getresponse().read() == b""
        receiver.stop()
        with pytest.raises(ConnectionError):
            connection.request("POST", "/v1/traces", body=b"")
            connection.getresponse()
    finally:
        connection.close()
        receiver.stop()


def test_stop_releases_both_ports():
    receiver = OTLPReceiver().start()
    ports = [int(url.rsplit(":", 1)[1]) for url in (receiver.endpoint, receiver.grpc_endpoint)]
    receiver.stop()
    receiver.stop()  # idempotent
    for port in ports:
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
            pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
