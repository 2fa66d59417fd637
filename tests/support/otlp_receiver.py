"""A real OTLP receiver for tests: OTLP/HTTP (protobuf) and OTLP/gRPC on loopback.

Tests point the proxy's real OTel exporters at it (`OTEL_EXPORTER_OTLP_ENDPOINT`) and then read
back what actually went over the wire, decoded into plain Python values. It keeps every raw
request body too, so canary tests can prove that prompt text never arrived.

    with OTLPReceiver() as rx:
        ...  # export to rx.endpoint (http/protobuf) or rx.grpc_endpoint (grpc)
        spans = rx.wait_for_spans(lambda spans: any(s.kind == "CLIENT" for s in spans))

Both servers run in background threads, so the receiver serves the same way under sync tests
and async ones (`async with`, `await rx.await_spans(...)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

# --- decoded records ---------------------------------------------------------------------------


Check = Callable[[list[Any]], object]  # what a wait waits for, of all records so far


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root span
    kind: str  # "SERVER", "CLIENT", "INTERNAL", "PRODUCER", "CONSUMER", "UNSPECIFIED"
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: str  # "UNSET", "OK", "ERROR"
    status_message: str
    resource: dict[str, Any]
    scope: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReceivedExemplar:
    value: float
    trace_id: str  # "" when the measurement was made outside a sampled span
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedMetricPoint:
    """One data point of one metric; histogram fields are None/empty for sums and gauges."""

    name: str
    unit: str
    kind: str  # "histogram", "sum", "gauge", "exponential_histogram", "summary"
    attributes: dict[str, Any]
    resource: dict[str, Any]
    time_ns: int
    value: float | None = None  # sum and gauge points
    count: int | None = None  # histogram points
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    exemplars: list[ReceivedExemplar] = field(default_factory=list)


@dataclass(frozen=True)
class ReceivedLog:
    body: Any
    severity_text: str
    attributes: dict[str, Any]
    trace_id: str
    span_id: str
    resource: dict[str, Any]
    time_ns: int


# --- pure decoding (protobuf -> python) --------------------------------------------------------


def decode_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [decode_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    return getattr(value, which)


def decode_attributes(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: decode_value(kv.value) for kv in attributes}


def _enum_name(enum: Any, number: int, prefix: str) -> str:
    return enum.Name(number).removeprefix(prefix)


def _scoped(groups: Iterable[Any], scopes: str, items: str) -> Iterator[tuple[dict, Any, Any]]:
    """Each item of an export with its resource's attributes and its instrumentation scope."""
    for group in groups:
        resource = decode_attributes(group.resource.attributes)
        for scoped in getattr(group, scopes):
            for item in getattr(scoped, items):
                yield resource, scoped.scope, item


def decode_spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    return [
        ReceivedSpan(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            kind=_enum_name(Span.SpanKind, span.kind, "SPAN_KIND_"),
            attributes=decode_attributes(span.attributes),
            events=[(e.name, decode_attributes(e.attributes)) for e in span.events],
            status_code=_enum_name(Status.StatusCode, span.status.code, "STATUS_CODE_"),
            status_message=span.status.message,
            resource=resource,
            scope=scope.name,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
        )
        for resource, scope, span in _scoped(request.resource_spans, "scope_spans", "spans")
    ]


def _number(point: Any) -> float:
    """The value of a NumberDataPoint or an Exemplar (either may carry an int or a double)."""
    return getattr(point, point.WhichOneof("value") or "as_double")


def _decode_point(
    name: str, unit: str, kind: str, resource: dict, point: Any
) -> ReceivedMetricPoint:
    common = {
        "name": name,
        "unit": unit,
        "kind": kind,
        "attributes": decode_attributes(point.attributes),
        "resource": resource,
        "time_ns": point.time_unix_nano,
    }
    if kind in ("sum", "gauge"):
        return ReceivedMetricPoint(**common, value=_number(point))
    exemplars = [
        ReceivedExemplar(
            value=_number(e),
            trace_id=e.trace_id.hex(),
            span_id=e.span_id.hex(),
            attributes=decode_attributes(e.filtered_attributes),
        )
        for e in getattr(point, "exemplars", ())
    ]
    return ReceivedMetricPoint(
        **common,
        count=point.count,
        sum=point.sum,
        bucket_counts=tuple(getattr(point, "bucket_counts", ())),
        explicit_bounds=tuple(getattr(point, "explicit_bounds", ())),
        exemplars=exemplars,
    )


def decode_metrics(request: ExportMetricsServiceRequest) -> list[ReceivedMetricPoint]:
    points = []
    for resource, _, metric in _scoped(request.resource_metrics, "scope_metrics", "metrics"):
        kind = metric.WhichOneof("data")
        if kind is None:
            continue
        for point in getattr(metric, kind).data_points:
            points.append(_decode_point(metric.name, metric.unit, kind, resource, point))
    return points


def decode_logs(request: ExportLogsServiceRequest) -> list[ReceivedLog]:
    return [
        ReceivedLog(
            body=decode_value(record.body),
            severity_text=record.severity_text,
            attributes=decode_attributes(record.attributes),
            trace_id=record.trace_id.hex(),
            span_id=record.span_id.hex(),
            resource=resource,
            time_ns=record.time_unix_nano,
        )
        for resource, _, record in _scoped(request.resource_logs, "scope_logs", "log_records")
    ]


def summarize_spans(spans: Sequence[ReceivedSpan]) -> str:
    """One line per span, for assertion messages."""
    lines = [
        f"  {s.kind:<8} {s.name!r} trace={s.trace_id[:8]} span={s.span_id[:8]}"
        f" parent={s.parent_span_id[:8] or '-'} status={s.status_code}"
        for s in spans
    ]
    return f"{len(spans)} span(s)" + ("\n" + "\n".join(lines) if lines else "")


# --- the receiver ------------------------------------------------------------------------------

# signal -> (request type, response type, decoder); the HTTP path is /v1/<signal>.
_SIGNALS: dict[str, tuple[type[Message], type[Message], Callable[[Any], list]]] = {
    "traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, decode_spans),
    "metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, decode_metrics),
    "logs": (ExportLogsServiceRequest, ExportLogsServiceResponse, decode_logs),
}
_GRPC_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
}


class RejectedError(Exception):
    """The receiver is set to fail; the transport answers 503 / UNAVAILABLE."""


class OTLPReceiver:
    """OTLP/HTTP and OTLP/gRPC servers on free loopback ports, storing what they receive."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._received: dict[str, list] = {signal: [] for signal in _SIGNALS}
        self._raw: list[bytes] = []
        self._request_count = 0
        self._failing = False
        self._behaviour, self._delay = "ok", 0.0
        self._stopped = threading.Event()  # releases the requests a "never" receiver holds
        self._http: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._grpc: grpc.Server | None = None
        self.endpoint = ""
        self.grpc_endpoint = ""

    # lifecycle

    def start(self) -> OTLPReceiver:
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self._http.block_on_close = False  # idle keep-alive connections must not block stop()
        threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="otlp-http", daemon=True
        ).start()  # a short poll interval keeps stop() fast
        self.endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"

        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"))
        self._grpc.add_generic_rpc_handlers([self._grpc_handler(s) for s in _SIGNALS])
        grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        self.grpc_endpoint = f"http://127.0.0.1:{grpc_port}"
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
            with self._changed:
                for connection in self._connections:  # a stopped collector keeps no connections
                    with contextlib.suppress(OSError):  # the client may have closed it already
                        connection.shutdown(socket.SHUT_RDWR)
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait()
            self._grpc = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> OTLPReceiver:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    # what tests read

    def spans(self) -> list[ReceivedSpan]:
        return self._snapshot("traces")

    def metrics(self) -> list[ReceivedMetricPoint]:
        return self._snapshot("metrics")

    def logs(self) -> list[ReceivedLog]:
        return self._snapshot("logs")

    def raw_payloads(self) -> list[bytes]:
        """Every request body received (decompressed), accepted or refused, on both transports."""
        with self._changed:
            return list(self._raw)

    @property
    def request_count(self) -> int:
        """Export requests received on both transports, including the ones refused."""
        with self._changed:
            return self._request_count

    def set_failing(self, failing: bool) -> None:
        """While failing, every export is refused (HTTP 503, gRPC UNAVAILABLE) and not stored."""
        with self._changed:
            self._failing = failing

    def set_behaviour(self, behaviour: str, delay: float = 0.0) -> None:
        """How OTLP/HTTP exports are answered: "ok"; "late" (after `delay` seconds);
        "never" (the request is read and held until stop); "garbage" (bytes that are not
        HTTP, then the connection closes); "500". Each request is still counted."""
        assert behaviour in BEHAVIOURS, behaviour
        with self._changed:
            self._behaviour, self._delay = behaviour, delay

    def clear(self) -> None:
        with self._changed:
            for records in self._received.values():
                records.clear()
            self._raw.clear()
            self._request_count = 0

    def wait_for_spans(self, predicate: Check = bool, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Block until `predicate(all spans so far)` holds; AssertionError with a summary if not."""
        return self._wait("traces", predicate, timeout, self._spans_seen)

    def wait_for_metrics(
        self, predicate: Check = bool, timeout: float = 10.0
    ) -> list[ReceivedMetricPoint]:
        """Block until `predicate(all metric points so far)` holds; AssertionError if not."""
        return self._wait("metrics", predicate, timeout, self._metrics_seen)

    async def await_spans(
        self, predicate: Check = bool, timeout: float = 10.0
    ) -> list[ReceivedSpan]:
        """`wait_for_spans` without blocking the event loop (the code under test may run on it)."""
        return await asyncio.to_thread(self.wait_for_spans, predicate, timeout)

    async def await_metrics(
        self, predicate: Check = bool, timeout: float = 10.0
    ) -> list[ReceivedMetricPoint]:
        return await asyncio.to_thread(self.wait_for_metrics, predicate, timeout)

    # internals

    def _snapshot(self, signal: str) -> list:
        with self._changed:
            return list(self._received[signal])

    def _wait(
        self, signal: str, predicate: Check, timeout: float, seen: Callable[[], str]
    ) -> list:
        """The records once `predicate` holds of them all; AssertionError naming what was
        `seen` once `timeout` passes first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                records = list(self._received[signal])
                if predicate(records):
                    return records
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        raise AssertionError(f"nothing satisfied the predicate within {timeout}s; {seen()}")

    def _spans_seen(self) -> str:
        return f"received {summarize_spans(self.spans())}"

    def _metrics_seen(self) -> str:
        points = self.metrics()
        return f"received {len(points)} point(s) of {sorted({p.name for p in points})}"

    def _ingest(self, signal: str, body: bytes) -> bytes:
        """Record one export request; the serialized OTLP response, or RejectedError."""
        request_type, response_type, decode = _SIGNALS[signal]
        with self._changed:
            self._request_count += 1
            self._raw.append(body)
            failing = self._failing
        if failing:
            raise RejectedError
        request = request_type()
        request.ParseFromString(body)  # DecodeError -> 400 / INVALID_ARGUMENT
        records = decode(request)
        with self._changed:
            self._received[signal].extend(records)
            self._changed.notify_all()
        return response_type().SerializeToString()

    def _grpc_handler(self, signal: str) -> grpc.GenericRpcHandler:
        def export(body: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                return self._ingest(signal, body)
            except RejectedError:
                context.abort(grpc.StatusCode.UNAVAILABLE, "receiver set to fail")
            except DecodeError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

        # No (de)serializers: the handler sees the raw message bytes, exactly as sent.
        return grpc.method_handlers_generic_handler(
            _GRPC_SERVICES[signal], {"Export": grpc.unary_unary_rpc_method_handler(export)}
        )


BEHAVIOURS = ("ok", "late", "never", "garbage", "500")
_DECOMPRESS = {"gzip": gzip.decompress, "deflate": zlib.decompress, "": bytes, "identity": bytes}


def _handler_for(receiver: OTLPReceiver) -> type[BaseHTTPRequestHandler]:
    class OTLPHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the exporters expect
        timeout = 30  # an idle keep-alive connection's thread ends eventually

        def setup(self) -> None:
            super().setup()
            with receiver._changed:
                receiver._connections.add(self.connection)

        def finish(self) -> None:
            with receiver._changed:
                receiver._connections.discard(self.connection)
            super().finish()

        def do_POST(self) -> None:
            signal = self.path.split("?")[0].removeprefix("/v1/")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = self.headers.get("Content-Encoding", "").strip().lower()
            if signal not in _SIGNALS or encoding not in _DECOMPRESS:
                self._reply(404 if signal not in _SIGNALS else 415, b"")
                return
            with receiver._changed:
                behaviour, delay = receiver._behaviour, receiver._delay
            if behaviour != "ok":
                self._misbehave(behaviour, delay)
                if behaviour != "late":
                    return
            try:
                self._reply(200, receiver._ingest(signal, _DECOMPRESS[encoding](body)))
            except RejectedError:
                self._reply(503, b"")
            except DecodeError:
                self._reply(400, b"")

        def _misbehave(self, behaviour: str, delay: float) -> None:
            if behaviour == "late":  # then answered as usual (and counted there)
                receiver._stopped.wait(delay)
                return
            with receiver._changed:
                receiver._request_count += 1
            if behaviour == "never":
                receiver._stopped.wait()
                self.close_connection = True
            elif behaviour == "garbage":
                self.wfile.write(b"\x00\xff\x13 not HTTP at all\r\n\r\n")
                self.close_connection = True
            else:
                self._reply(500, b"")

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: test output stays readable."""

    return OTLPHandler
