"""OTel span export and meter setup from the standard OTEL_* variables, and the Prometheus
registry.

Export runs on the SDK's background threads, so a slow or dead collector never blocks a
request; what cannot be exported is counted in latency_proxy_telemetry_dropped_total
(export.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import prometheus_client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.openmetrics import exposition as openmetrics

from latency_proxy.base import semconv as sc
from latency_proxy.base.config import ConfigError
from latency_proxy.telemetry import instruments
from latency_proxy.telemetry.export import CountingMetricExporter, Drops, SpanQueue, export_timeout
from latency_proxy.telemetry.tracing import Tracing
from latency_proxy.telemetry.worker_store import Store

log = logging.getLogger("latency_proxy.telemetry")
OPENMETRICS = "application/openmetrics-text"
prometheus_client.disable_created_metrics()


class ModelLabels:
    """Which client-supplied model names may be recorded at all.

    A model name comes from the request body, so until an upstream has vouched for it, it
    is the client's text like any other (a prompt pasted into `model` must not reach a
    metric label). Recorded: route names; the names the upstreams list at /v1/models (up to
    `limit`), asked at start and on an interval (models_list.learn_models) with each
    route's credentials; only while no upstream has listed any (one without /v1/models),
    names an upstream answered with success (up to `limit`). An upstream that answers 200
    for any name must not let the first clients' names take the labels over: once a listing
    came back, a name no upstream listed is `other`, whatever the upstream answered, and
    the names confirmed before it give their slots back.
    """

    def __init__(self, known: Sequence[str], limit: int = 32) -> None:
        self._routes = set(known)
        self._listings: dict[str, list[str]] = {}  # route -> what its upstream listed last
        self._listed: set[str] | None = None
        self._confirmed: set[str] = set()
        self._limit = limit

    def listed(self, route: str, names: Iterable[str]) -> None:
        """What one route's upstream lists now (GET /v1/models): with the other routes' last
        lists, the labels from now on."""
        self._listings[route] = [name for name in names if name not in self._routes]
        merged = dict.fromkeys(name for names in self._listings.values() for name in names)
        self._listed = set(list(merged)[: self._limit])
        self._confirmed.clear()

    def confirm(self, model: str) -> None:
        if self._listed is not None:
            return  # the upstreams said which models they serve
        if model not in self._routes and len(self._confirmed) < self._limit:
            self._confirmed.add(model)

    def __call__(self, model: str | None) -> str:
        if model is None:
            return ""
        if model in self._routes or model in self._confirmed or model in (self._listed or ()):
            return model
        return sc.OTHER_MODEL

    def recorded(self, model: str | None) -> str | None:
        """What a sink records for a request naming `model`; None when it names none."""
        return None if model is None else self(model)


def _protocol(signal: str, env: Mapping[str, str]) -> str:
    return env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )


def _exporting(signal: str, env: Mapping[str, str]) -> bool:
    if env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    )


GRPC_MISSING = (
    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the OTLP/gRPC exporter, which is not installed: "
    "pip install 'latency-proxy[grpc]' (or use http/protobuf, the default)"
)


def _exporter(signal: str, module: str, name: str, env: Mapping[str, str]) -> Any:
    """The OTLP exporter class for the signal's protocol (grpc or http/protobuf)."""
    protocol = "grpc" if _protocol(signal, env) == "grpc" else "http"
    try:
        found = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{protocol}.{module}")
    except ImportError:
        if protocol != "grpc":
            raise
        raise ConfigError(GRPC_MISSING) from None
    return getattr(found, name)


def _span_exporter(env: Mapping[str, str]) -> SpanExporter:
    if _protocol("TRACES", env) != "grpc":
        from latency_proxy.telemetry import otlp_http  # loads the HTTP exporter: only if used

        return otlp_http.span_exporter()
    return _exporter("TRACES", "trace_exporter", "OTLPSpanExporter", env)()


def _metric_exporter(env: Mapping[str, str]) -> MetricExporter:
    return _exporter("METRICS", "metric_exporter", "OTLPMetricExporter", env)()


class Telemetry:
    """Tracing, instruments and the Prometheus registry of one proxy process."""

    def __init__(
        self,
        route_names: Sequence[str],
        provider_name: str = "vllm",
        env: Mapping[str, str] = os.environ,
        store: Store | None = None,
    ) -> None:
        """With a store (a worker of several), metric values go there for the supervisor's
        /metrics; OTLP export, when configured, stays each process's own."""
        self.provider_name = provider_name
        self.latest_gen_ai = sc.latest_gen_ai(env)  # the current GenAI names, not the older
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "latency-proxy")})
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.model_label = ModelLabels(route_names)
        self._meter_provider: MeterProvider | None = None
        self._metric_exporter: CountingMetricExporter | None = None
        meter = None
        dropped = instruments.Instrument(instruments.TELEMETRY_DROPPED, self.registry, None, store)
        if _exporting("METRICS", env):
            drops = Drops(dropped, "metrics", export_timeout("METRICS", env))
            self._metric_exporter = CountingMetricExporter(_metric_exporter(env), drops)
            self._meter_provider = MeterProvider(
                resource=resource,
                metric_readers=[PeriodicExportingMetricReader(self._metric_exporter)],
                shutdown_on_exit=False,  # shutdown() flushes, within its bound
            )
            meter = self._meter_provider.get_meter("latency_proxy")
        self.instruments = {
            spec.name: instruments.Instrument(spec, self.registry, meter, store)
            for spec in instruments.active(self.latest_gen_ai)
            if spec is not instruments.TELEMETRY_DROPPED
        }
        self.instruments[instruments.TELEMETRY_DROPPED.name] = dropped
        self._span_queue: SpanQueue | None = None
        if _exporting("TRACES", env):
            drops = Drops(dropped, "traces", export_timeout("TRACES", env))
            self._span_queue = SpanQueue(_span_exporter(env), drops, env)
        self.tracing = Tracing(resource, [self._span_queue] if self._span_queue else [], env)

    def instrument(self, spec: instruments.Spec) -> instruments.Instrument:
        return self.instruments[spec.name]

    def exposition(self, accept: str) -> tuple[bytes, str]:
        return exposition(self.registry, accept)

    def shutdown(self, timeout: float) -> None:
        """Flush and stop both exporters at once, giving up after `timeout` seconds whatever
        the sink does; what did not go out by then is counted and logged."""
        flushes = [lambda: self.tracing.shutdown(int(timeout * 1000))]
        if self._meter_provider is not None:
            provider = self._meter_provider
            flushes.append(lambda: provider.shutdown(timeout_millis=timeout * 1000))
        workers = [threading.Thread(target=f, name="telemetry-flush", daemon=True) for f in flushes]
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        if any(worker.is_alive() for worker in workers):
            spans = self._span_queue.abandon() if self._span_queue else 0
            points = self._metric_exporter.drops.abandon() if self._metric_exporter else 0
            log.warning(
                "telemetry flush did not finish in %.1fs; exiting without it: "
                "%d spans, %d metric points not exported",
                timeout,
                spans,
                points,
            )


def exposition(registry: prometheus_client.CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The /metrics body: OpenMetrics (with exemplars) when asked for, else text 0.0.4."""
    if OPENMETRICS in accept:
        return openmetrics.generate_latest(registry), openmetrics.CONTENT_TYPE_LATEST
    return prometheus_client.generate_latest(registry), CONTENT_TYPE_LATEST
