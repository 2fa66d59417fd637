"""CPU of the proxy's per-request bookkeeping on its own: no sockets, no event loop.

One scripted streamed chat request (`--tokens` content events 10 ms apart, usage at the end)
goes through the proxy's own code as the forwarder drives it: SpanWriter.start_server and
start_client, a StreamMeter fed the events, then RequestWriter.finish (the meter's figures, the
metric observations, ending both spans, the log line, written to /dev/null through the JSON
handler). Beside it the OpenTelemetry SDK's floor: two spans started and ended with the same
attributes passed in one dict, nothing else. The fastest of `--repeat` rounds of `--n`
requests is shown per part (the least disturbed by the rest of a shared machine).

    python bench/record_micro.py [--tokens 64] [--n 2000] [--repeat 15] [--export-spans]
                                 [--otlp-metrics] [--json]

Without --export-spans the spans have no processor, as in the proxy without an OTLP endpoint
(their contexts are made, nothing else); with it, each ended span is encoded to OTLP protobuf,
inline, and discarded: the proxy's spans by the proxy's encoder, the SDK's floor by the
SDK's.

--otlp-metrics also pushes the metrics over OTLP (as with OTEL_METRICS_EXPORTER=otlp): each
value then goes to an OTel histogram as well, one call per value (OTel's API has no call for
many values).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind

from latency_proxy.base.config import Route
from latency_proxy.measure.conversation import KEY_BYTES
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from latency_proxy.record.exchange import Exchange, Finished
from latency_proxy.record.model_call import ModelCall
from latency_proxy.telemetry import logs, otlp_encoding
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
from latency_proxy.telemetry.request_writer import RequestWriter
from latency_proxy.telemetry.sessions import SessionTable
from latency_proxy.telemetry.tracing import Tracing

SCOPE = {
    "method": "POST",
    "path": "/v1/chat/completions",
    "scheme": "http",
    "http_version": "1.1",
    "server": ("127.0.0.1", 8080),
    "client": ("127.0.0.1", 50000),
}
ROUTE = Route("bench", "http://127.0.0.1:8000")


def stream_reads(tokens: int) -> list[tuple[float, bytes]]:
    """The reads of a vLLM-like chat stream, as (seconds after arrival, bytes)."""
    head = b'data: {"id":"c","object":"chat.completion.chunk","model":"bench","choices":'
    reads = [(0.001, head + b'[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n')]
    for i in range(tokens):
        content = head + b'[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
        reads.append((0.05 + 0.01 * i, content))
    tail = head + b'[],"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n' % tokens
    reads.append((0.05 + 0.01 * tokens, tail + b"data: [DONE]\n\n"))
    return reads


class Bookkeeping:
    """The proxy's per-request steps, each callable on its own."""

    def __init__(self, tokens: int, otlp_metrics: bool = False, export: bool = False) -> None:
        # metrics pushed over OTLP too (to a port nothing listens on: the export every
        # minute fails, the recording path is what is timed)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": "none"}
        self.telemetry = Telemetry([ROUTE.name], env=env if otlp_metrics else {})
        resource = Resource.create({"service.name": "latency-proxy"})
        own, sdk = _Encoding(otlp_encoding.encode_spans), _Encoding(_sdk_encoding)
        self.telemetry.tracing = Tracing(resource, [SimpleSpanProcessor(own)] if export else [], {})
        self.sdk = TracerProvider(resource=resource, shutdown_on_exit=False)
        if export:
            self.sdk.add_span_processor(SimpleSpanProcessor(sdk))
        sessions = SessionTable(b"k" * KEY_BYTES, 10_000, 600.0)
        self.writer = RequestWriter(self.telemetry, ContentPolicy(), sessions)
        events = []
        parser = SSEParser()
        for t, data in stream_reads(tokens):
            events.extend((t, event) for event in parser.feed(data))
        self.events = events
        self.end = events[-1][0] + 0.001

    def start(self) -> Exchange:
        t0, wall0 = time.perf_counter(), time.time_ns()
        span = self.writer.spans.start_server(SCOPE, "rid", True, Context(), wall0)
        exchange = Exchange("rid", "POST", SCOPE["path"], t0, wall0, span)
        exchange.call = ModelCall("chat", b"{}", model="bench", stream=True, max_tokens=64)
        exchange.route = ROUTE
        exchange.status = 200
        self.writer.spans.start_client(exchange)
        exchange.t_upstream_call = t0 + 0.0002
        return exchange

    def meter(self, exchange: Exchange) -> None:
        meter = StreamMeter(exchange.t0)
        for t, event in self.events:
            meter.on_event(exchange.t0 + t, event)
        exchange.meter = meter
        exchange.overhead_event_sum, exchange.overhead_events = 1e-5 * len(self.events), 66

    def finish(self, exchange: Exchange) -> None:
        self.writer.finish(exchange, exchange.t0 + self.end)

    def sdk_floor(self) -> None:
        """Two spans, attributes in one dict each, started and ended: the SDK's own cost."""
        tracer = self.sdk.get_tracer("latency_proxy")
        wall0 = time.time_ns()
        server = tracer.start_span(
            "POST /v1/chat/completions", Context(), SpanKind.SERVER, SERVER_ATTRS, start_time=wall0
        )
        context = trace.set_span_in_context(server)
        client = tracer.start_span(
            "chat bench", context, SpanKind.CLIENT, CLIENT_ATTRS, start_time=wall0
        )
        client.end(wall0 + 1000)
        server.end(wall0 + 1000)


SERVER_ATTRS = {
    "http.request.method": "POST",
    "url.path": "/v1/chat/completions",
    "url.scheme": "http",
    "network.protocol.version": "1.1",
    "latency_proxy.request_id": "rid",
    "http.route": "/v1/chat/completions",
    "server.address": "127.0.0.1",
    "server.port": 8080,
    "client.address": "127.0.0.1",
    "http.response.status_code": 200,
    "latency_proxy.outcome": "ok",
    "latency_proxy.overhead.request_s": 0.0002,
    "latency_proxy.overhead.event_s": 0.00001,
}
CLIENT_ATTRS = {
    "server.address": "127.0.0.1",
    "server.port": 8000,
    "http.request.method": "POST",
    "latency_proxy.request_id": "rid",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "vllm",
    "gen_ai.request.stream": True,
    "gen_ai.request.max_tokens": 64,
    "gen_ai.request.model": "bench",
    "gen_ai.response.model": "bench",
    "gen_ai.response.id": "c",
    "gen_ai.usage.input_tokens": 8,
    "gen_ai.usage.output_tokens": 64,
    "latency_proxy.e2e_s": 0.7,
    "latency_proxy.ttft_s": 0.05,
    "latency_proxy.tpot_s": 0.01,
    "latency_proxy.time_to_first_chunk_s": 0.001,
    "gen_ai.response.finish_reasons": ("length",),
    "latency_proxy.chunks": 64,
    "latency_proxy.token_source": "usage_total",
    "latency_proxy.ttfnt_n": (3,),
    "latency_proxy.ttfnt_s": (0.07,),
    "http.response.status_code": 200,
}


def fastest(step: Callable[[], None], n: int, repeat: int) -> float:
    """µs per call, the fastest round."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(n):
            step()
        best = min(best, (time.process_time() - start) / n)
    return best * 1e6


def measure(tokens: int, n: int, repeat: int, otlp_metrics: bool, export: bool) -> dict[str, float]:
    book = Bookkeeping(tokens, otlp_metrics, export)
    writer = book.writer

    def prepared(finish: bool) -> tuple[Exchange, object, float]:
        exchange = book.start()
        book.meter(exchange)
        t_end = exchange.t0 + book.end
        return exchange, exchange.meter.finish(t_end) if finish else None, t_end

    def per_prepared(step: Callable[[Exchange, object, float], None], finish: bool = True) -> float:
        """µs per call of step on freshly started, metered exchanges (their meters' figures
        computed beforehand, unless the step is to compute them), the fastest round."""
        best = float("inf")
        for _ in range(repeat):
            batch = [prepared(finish) for _ in range(n)]
            start = time.process_time()
            for exchange, timing, t_end in batch:
                step(exchange, timing, t_end)
            best = min(best, (time.process_time() - start) / n)
        return best * 1e6

    def whole(exchange: Exchange, timing: object, t_end: float) -> None:
        writer.finish(exchange, t_end)

    trace_id = "0" * 32
    return {
        "start both spans": fastest(book.start, n, repeat),
        "record (RequestWriter.finish, the meter's figures included)": per_prepared(whole, False),
        "  metric observations": per_prepared(
            lambda x, t, end: writer.metrics.record(x, t, trace_id)
        ),
        "  ending the spans": per_prepared(
            lambda x, t, end: writer.spans.end(Finished(x, t, end, {}))
        ),
        "  the log line": per_prepared(
            lambda x, t, end: writer._access_log.write(Finished(x, t, end, {}))
        ),
        "SDK floor: two spans, one attribute dict each": fastest(book.sdk_floor, n, repeat),
    }


class _Encoding(SpanExporter):
    """Encodes each span as an OTLP/HTTP exporter does (the proxy's or the SDK's), then
    drops it."""

    def __init__(self, encode: Callable[[Sequence[ReadableSpan]], bytes]) -> None:
        self._encode = encode

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._encode(spans)
        return SpanExportResult.SUCCESS


def _sdk_encoding(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializePartialToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--export-spans", action="store_true", help="spans encoded as OTLP")
    parser.add_argument("--otlp-metrics", action="store_true", help="OTel histograms as well")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the log stream for the whole run
    logs.configure("info", "json")
    logging.root.handlers[0].setStream(devnull)
    figures = measure(args.tokens, args.n, args.repeat, args.otlp_metrics, args.export_spans)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    pushed = ", metrics pushed over OTLP too" if args.otlp_metrics else ""
    encoded = ", spans encoded as OTLP" if args.export_spans else ", spans not exported"
    rounds = f"fastest of {args.repeat} rounds of {args.n} requests"
    print(f"{args.tokens} tokens, {rounds}{encoded}{pushed}\n")
    print("| part | µs/request |\n|---|---|")
    for part, us in figures.items():
        print(f"| {part} | {us:.1f} |")


if __name__ == "__main__":
    main()
