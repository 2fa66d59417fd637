"""The SDK's OTLP/HTTP span exporter, sending the proxy's own encoding (otlp_encoding.py).

Everything the SDK's exporter sets up from `OTEL_EXPORTER_OTLP_*` stays its own: endpoint,
headers, TLS, compression, timeout, retries, the request size limit and its opt-in
self-metrics. Only the bytes change, which needs the private fields below; they are not a
contract the SDK keeps, so tests/proxy/telemetry/test_otlp_encoding.py checks each on the installed
exporter and `span_exporter` falls back to the SDK's own exporter, slower, when one is
missing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from latency_proxy.telemetry.otlp_encoding import encode_spans

# the exporter's fields `export` reads: set by its __init__
PRIVATE_FIELDS = ("_shutdown", "_client", "_max_request_size", "_metrics")

_logger = logging.getLogger(__name__)


class OwnEncodingSpanExporter(OTLPSpanExporter):
    """OTLPSpanExporter whose `export` writes the request bytes directly."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = encode_spans(spans)
            except Exception as error:  # a value the encoder does not know: the batch is lost
                _logger.error("Failed to encode span batch: %s", type(error).__name__)
                result.error = error
                return SpanExportResult.FAILURE
            if 0 < self._max_request_size < len(data):
                _logger.warning("Dropping span batch: %d bytes is over the limit", len(data))
                result.error = ValueError("span batch over max_request_size")
                return SpanExportResult.FAILURE
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def uses_own_encoding(exporter: OTLPSpanExporter) -> bool:
    """Whether the installed exporter has every field `OwnEncodingSpanExporter` reads."""
    client = getattr(exporter, "_client", None)
    return all(hasattr(exporter, name) for name in PRIVATE_FIELDS) and callable(
        getattr(client, "export", None)
    )


def span_exporter() -> SpanExporter:
    """The OTLP/HTTP span exporter configured from the environment, own encoding if it can."""
    exporter = OwnEncodingSpanExporter()
    if uses_own_encoding(exporter):
        return exporter
    return OTLPSpanExporter()
