"""The metric instruments, defined once and written to two sinks (docs/proxy/metrics.md's
table is built from ALL).

Each instrument feeds a Prometheus collector (for the admin port's /metrics) and, when an
OTLP metrics endpoint is configured, an OTel instrument; the Prometheus names and labels
are exactly what the OTel→Prometheus translation makes of the OTel ones, so one dashboard
serves a direct scrape and a collector alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import prometheus_client
from opentelemetry.context import Context
from opentelemetry.metrics import Meter

from latency_proxy.base import semconv as sc
from latency_proxy.telemetry import buckets
from latency_proxy.telemetry.histogram import Histogram
from latency_proxy.telemetry.worker_store import SharedFamily, Store

PER_REQUEST = (sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_REQUEST_MODEL, sc.ROUTE)


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # OTel instrument name
    unit: str  # UCUM, as OTel wants it
    description: str
    kind: str  # histogram | counter | updown
    attributes: tuple[str, ...] = PER_REQUEST
    bounds: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        base = self.name.replace(".", "_")
        if self.unit == "s":
            base += "_seconds"
        elif self.unit == "1":
            base += "_ratio"
        return base

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(a.replace(".", "_") for a in self.attributes)


TTFT = Spec(
    "gen_ai.server.time_to_first_token",
    "s",
    "Time to the first content event (TTFT)",
    "histogram",
    bounds=buckets.LATENCY_S,
)
TPOT = Spec(
    "gen_ai.server.time_per_output_token",
    "s",
    "Time per output token after the first (TPOT)",
    "histogram",
    bounds=buckets.TOKEN_LATENCY_S,
)
DURATION = Spec(
    "gen_ai.server.request.duration",
    "s",
    "End-to-end request duration, to the last byte",
    "histogram",
    bounds=buckets.LATENCY_S,
)
TOKEN_USAGE = Spec(
    "gen_ai.client.token.usage",
    "{token}",
    "Input and output tokens per request",
    "histogram",
    (*PER_REQUEST, sc.GEN_AI_TOKEN_TYPE),
    buckets.TOKENS,
)
TIME_TO_FIRST_CHUNK = Spec(
    "gen_ai.client.operation.time_to_first_chunk",
    "s",
    "Time to the first SSE event of any kind",
    "histogram",
    bounds=buckets.LATENCY_S,
)
TIME_PER_OUTPUT_CHUNK = Spec(
    "gen_ai.client.operation.time_per_output_chunk",
    "s",
    "Gap between consecutive content events",
    "histogram",
    bounds=buckets.TOKEN_LATENCY_S,
)
TIME_TO_FIRST_N_TOKENS = Spec(
    "latency_proxy.time_to_first_n_tokens",
    "s",
    "Time until the cumulative output tokens reach n",
    "histogram",
    (*PER_REQUEST, sc.FIRST_N),
    buckets.LATENCY_S,
)
TOKENS_PER_CHUNK = Spec(
    "latency_proxy.tokens_per_chunk",
    "{token}",
    "Output tokens per content event (from per-chunk usage)",
    "histogram",
    bounds=buckets.TOKENS_PER_CHUNK,
)
OVERHEAD = Spec(
    "latency_proxy.overhead",
    "s",
    "Time the proxy itself adds: request in to request out upstream (phase=request); "
    "mean per event, upstream in to client out (phase=event)",
    "histogram",
    (*PER_REQUEST, sc.PHASE),
    buckets.OVERHEAD_S,
)
REQUESTS = Spec(
    "latency_proxy.requests",
    "",
    "Requests to the measured endpoints",
    "counter",
    (*PER_REQUEST, sc.HTTP_RESPONSE_STATUS_CODE, sc.OUTCOME),
)
ACTIVE = Spec("latency_proxy.requests.active", "", "Requests in flight", "updown")
UPSTREAM_ERRORS = Spec(
    "latency_proxy.upstream.errors",
    "",
    "Failed upstream calls by kind",
    "counter",
    (*PER_REQUEST, sc.KIND),
)
NOT_RETRIED = Spec(
    "latency_proxy.upstream.not_retried",
    "",
    "Requests that went out on a reused upstream connection that then closed unanswered, "
    "not sent again because their method is not idempotent (RFC 9110 §9.2.2)",
    "counter",
    (sc.ROUTE, sc.HTTP_REQUEST_METHOD),
)
COALESCED_STREAMS = Spec(
    "latency_proxy.coalesced_streams",
    "",
    "Streams that arrived from upstream in bursts (latency_proxy/measure/coalescing.py): something "
    "before the proxy buffers, so ITL and TPOT are not the server's",
    "counter",
)
OVERSIZED_EVENTS = Spec(
    "latency_proxy.oversized_events",
    "",
    "SSE events past --max-event-bytes: passed through to the client, not metered",
    "counter",
)
TELEMETRY_DROPPED = Spec(
    "latency_proxy.telemetry.dropped",
    "",
    "Spans or metric points that did not reach the sink, by why: queue_full, export_failed, "
    "timeout",
    "counter",
    (sc.SIGNAL, sc.ERROR_TYPE),
)
LOOP_LAG = Spec(
    "latency_proxy.event_loop.lag",
    "s",
    "How late the proxy's event loop ran its periodic probe: the proxy's own queueing, "
    "part of every TTFT, TPOT and overhead it measures meanwhile",
    "histogram",
    (),
    buckets.LOOP_LAG_S,
)
SESSIONS_EXPIRED = Spec(
    "latency_proxy.sessions.expired",
    "",
    "Agent sessions no longer followed, by why: idle (no call for --session-idle) or "
    "capacity (the least recent, past --max-sessions)",
    "counter",
    (sc.REASON,),
)
WORKER_RESTARTS = Spec(
    "latency_proxy.worker.restarts",
    "",
    "Worker processes (--workers) that ended unasked and were started again",
    "counter",
    (),
)

ANSWER_TTFT = Spec(
    "latency_proxy.time_to_first_answer_token",
    "s",
    "Time to the first answer token (content, text or tool call), after any reasoning",
    "histogram",
    bounds=buckets.LATENCY_S,
)
REASONING_TOKENS = Spec(
    "latency_proxy.reasoning_tokens",
    "{token}",
    "Reasoning tokens per request (the server's count, else counted from the stream)",
    "histogram",
    bounds=buckets.TOKENS,
)
CACHED_FRACTION = Spec(
    "latency_proxy.cached_token_fraction",
    "1",
    "Share of the prompt's tokens the server took from its prefix cache",
    "histogram",
    bounds=buckets.FRACTION,
)
STALLS = Spec(
    "latency_proxy.stalls",
    "",
    "Gaps between content events longer than --stall-threshold",
    "counter",
)

# The current GenAI conventions (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental):
# these replace TOKEN_USAGE, TIME_TO_FIRST_CHUNK and TIME_PER_OUTPUT_CHUNK
INFERENCE_TIME_TO_FIRST_CHUNK = Spec(
    "gen_ai.client.inference.time_to_first_chunk",
    "s",
    TIME_TO_FIRST_CHUNK.description,
    "histogram",
    bounds=buckets.LATENCY_S,
)
INFERENCE_TIME_PER_OUTPUT_CHUNK = Spec(
    "gen_ai.client.inference.time_per_output_chunk",
    "s",
    TIME_PER_OUTPUT_CHUNK.description,
    "histogram",
    bounds=buckets.TOKEN_LATENCY_S,
)
INFERENCE_INPUT_TOKENS = Spec(
    "gen_ai.client.inference.operation.input_tokens",
    "{token}",
    "Input tokens per request",
    "histogram",
    bounds=buckets.TOKENS,
)
INFERENCE_OUTPUT_TOKENS = Spec(
    "gen_ai.client.inference.operation.output_tokens",
    "{token}",
    "Output tokens per request",
    "histogram",
    bounds=buckets.TOKENS,
)
USAGE_INPUT_TOKENS = Spec(
    "gen_ai.client.inference.usage.input_tokens", "{token}", "Input tokens", "counter"
)
USAGE_OUTPUT_TOKENS = Spec(
    "gen_ai.client.inference.usage.output_tokens", "{token}", "Output tokens", "counter"
)
USAGE_CACHE_READ_TOKENS = Spec(
    "gen_ai.client.inference.usage.cache_read.input_tokens",
    "{token}",
    "Input tokens served from the prefix cache",
    "counter",
)
USAGE_REASONING_TOKENS = Spec(
    "gen_ai.client.inference.usage.reasoning.output_tokens",
    "{token}",
    "Output tokens spent reasoning",
    "counter",
)
LEGACY_ONLY = (TOKEN_USAGE, TIME_TO_FIRST_CHUNK, TIME_PER_OUTPUT_CHUNK)
LATEST_ONLY = (
    INFERENCE_TIME_TO_FIRST_CHUNK,
    INFERENCE_TIME_PER_OUTPUT_CHUNK,
    INFERENCE_INPUT_TOKENS,
    INFERENCE_OUTPUT_TOKENS,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    USAGE_CACHE_READ_TOKENS,
    USAGE_REASONING_TOKENS,
)

ALL = (
    TTFT,
    TPOT,
    DURATION,
    TOKEN_USAGE,
    TIME_TO_FIRST_CHUNK,
    TIME_PER_OUTPUT_CHUNK,
    TIME_TO_FIRST_N_TOKENS,
    TOKENS_PER_CHUNK,
    OVERHEAD,
    REQUESTS,
    ACTIVE,
    UPSTREAM_ERRORS,
    NOT_RETRIED,
    COALESCED_STREAMS,
    OVERSIZED_EVENTS,
    TELEMETRY_DROPPED,
    LOOP_LAG,
    SESSIONS_EXPIRED,
    WORKER_RESTARTS,
    ANSWER_TTFT,
    REASONING_TOKENS,
    CACHED_FRACTION,
    STALLS,
    *LATEST_ONLY,
)


def active(latest: bool) -> tuple[Spec, ...]:
    """The instruments one process writes: the current GenAI names or the older ones."""
    left_out = LEGACY_ONLY if latest else LATEST_ONLY
    return tuple(spec for spec in ALL if spec not in left_out)


class Instrument:
    """One instrument in both sinks. Label values are passed positionally, in spec order."""

    __slots__ = ("_children", "_otel", "_prom", "spec")

    def __init__(
        self,
        spec: Spec,
        registry: prometheus_client.CollectorRegistry,
        meter: Meter | None,
        store: Store | None = None,
    ) -> None:
        """With a store (a worker of several), values go there instead of the registry."""
        self.spec = spec
        self._children: dict[tuple[str, ...], Any] = {}
        labels = spec.label_names
        unit = {"s": "seconds", "1": "ratio"}.get(spec.unit, "")
        self._prom: Any
        if store is not None:
            self._prom = SharedFamily(spec.name, spec.kind, spec.bounds, bool(labels), store)
        elif spec.kind == "histogram":
            self._prom = Histogram(
                spec.prometheus_name, spec.description, labels, spec.bounds, registry, unit
            )
        elif spec.kind == "counter":
            self._prom = prometheus_client.Counter(
                spec.prometheus_name, spec.description, labels, registry=registry
            )
        else:
            self._prom = prometheus_client.Gauge(
                spec.prometheus_name, spec.description, labels, registry=registry
            )
        self._otel: Any = None  # an OTel histogram, counter or up-down counter
        if meter is not None:
            if spec.kind == "histogram":
                self._otel = meter.create_histogram(
                    spec.name,
                    spec.unit,
                    spec.description,
                    explicit_bucket_boundaries_advisory=list(spec.bounds),
                )
            elif spec.kind == "counter":
                self._otel = meter.create_counter(spec.name, spec.unit, spec.description)
            else:
                self._otel = meter.create_up_down_counter(spec.name, spec.unit, spec.description)

    def load(
        self, labels: tuple[str, ...], values: Sequence[float], exemplars: Sequence[Any]
    ) -> None:
        """Set one label set to a sum of workers' values (the supervisor's /metrics): a
        histogram's bucket counts, sum and exemplars, or a counter's or gauge's value."""
        child = self._child(labels)
        if self.spec.kind == "histogram":
            child.counts = [int(count) for count in values[:-1]]
            child.sum = values[-1]
            child.exemplars = list(exemplars)
        else:
            child.inc(values[0])

    def record(
        self,
        value: float,
        labels: tuple[str, ...],
        trace_id: str | None = None,
        context: Context | None = None,
    ) -> None:
        """Observe (histogram) or add (counter, up-down counter) one value."""
        self.record_all((value,), labels, trace_id, context)

    def record_all(
        self,
        values: Sequence[float],
        labels: tuple[str, ...],
        trace_id: str | None = None,
        context: Context | None = None,
    ) -> None:
        """Record several values under one label set (e.g. every inter-token gap of a
        request) in one step; in a histogram the largest carries the trace-id exemplar, so
        the slowest observation of a request is the one that links to its trace."""
        if not values:
            return
        child = self._child(labels)
        if self.spec.kind == "histogram":
            child.observe(values, trace_id)
        else:
            for value in values:
                child.inc(value)
        if self._otel is not None:
            attributes = dict(zip(self.spec.attributes, labels, strict=True))
            write = self._otel.record if self.spec.kind == "histogram" else self._otel.add
            for value in values:
                write(value, attributes, context)

    def _child(self, labels: tuple[str, ...]) -> Any:
        """The label set's series, resolved once (labels() validates on every call); an
        unlabelled prometheus_client counter or gauge is its own."""
        child = self._children.get(labels)
        if child is None:
            own = not labels and isinstance(self._prom, prometheus_client.metrics.MetricWrapperBase)
            child = self._children[labels] = self._prom if own else self._prom.labels(*labels)
        return child
