"""Between the proxy and its telemetry sink: a bounded span queue, one export thread, and
every span or metric point that does not reach the sink counted by why.

The SDK's BatchSpanProcessor logs "Queue full, dropping Span" once and counts nothing, and
its flush waits for each export however long the sink takes. Here a span that finds the
queue full is counted at once (`queue_full`); a batch the sink refused or answered badly
when its export returns (`export_failed`); one that took the whole export timeout, or was
still queued or in flight when the shutdown flush ran out, as `timeout`. Nothing waits
here past the deadline its caller gives.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from opentelemetry.context import Context
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from latency_proxy.telemetry import instruments

QUEUE_FULL, EXPORT_FAILED, TIMEOUT = "queue_full", "export_failed", "timeout"
DEFAULT_EXPORT_TIMEOUT_S = 10.0  # the OTLP exporters' own default


def _env_number(env: Mapping[str, str], names: Sequence[str], default: float) -> float:
    """The first of `names` set to a finite positive number (as the SDK reads them)."""
    for name in names:
        try:
            value = float(env.get(name, ""))
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return value
    return default


def export_timeout(signal: str, env: Mapping[str, str]) -> float:
    """Seconds one export may take, retries included: what the OTLP exporters read."""
    names = (f"OTEL_EXPORTER_OTLP_{signal}_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    return _env_number(env, names, DEFAULT_EXPORT_TIMEOUT_S)


class Drops:
    """One signal's losses into latency_proxy_telemetry_dropped_total, and what is in
    flight, so an export the shutdown gives up on is counted too (and only once)."""

    def __init__(self, counter: instruments.Instrument, signal: str, timeout_s: float) -> None:
        self._counter = counter
        self._signal = signal
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._in_flight = 0
        self._abandoned = False

    def lost(self, count: int, reason: str) -> None:
        if count > 0:
            self._counter.record(count, (self._signal, reason))

    def deliver(self, count: int, export: Callable[[], bool]) -> bool:
        """Run one export of `count` items; a failure is counted by how it failed."""
        with self._lock:
            self._in_flight += count
        started = time.monotonic()
        try:
            delivered = export()
        except Exception:  # an exporter bug must not take the proxy down
            delivered = False
        took = time.monotonic() - started
        with self._lock:
            self._in_flight -= count
            if self._abandoned:
                return delivered  # already counted as given up on
        if not delivered:
            # the exporter stops retrying once the next backoff would not fit its timeout
            self.lost(count, TIMEOUT if took >= 0.9 * self._timeout_s else EXPORT_FAILED)
        return delivered

    def abandon(self, queued: int = 0) -> int:
        """At the end of the shutdown flush: what is in flight and `queued` is lost."""
        with self._lock:
            self._abandoned = True
            lost = self._in_flight + queued
        self.lost(lost, TIMEOUT)
        return lost


class SpanQueue(SpanProcessor):
    """A bounded queue of ended spans, exported in batches on one daemon thread.

    Sized and timed by the SDK's variables (OTEL_BSP_MAX_QUEUE_SIZE, 2048;
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512; OTEL_BSP_SCHEDULE_DELAY, 5000 ms)."""

    def __init__(self, exporter: SpanExporter, drops: Drops, env: Mapping[str, str]) -> None:
        self._exporter = exporter
        self._drops = drops
        self._max_queue = int(_env_number(env, ("OTEL_BSP_MAX_QUEUE_SIZE",), 2048))
        batch = int(_env_number(env, ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE",), 512))
        self._batch = min(batch, self._max_queue)
        self._delay_s = _env_number(env, ("OTEL_BSP_SCHEDULE_DELAY",), 5000) / 1000
        self._queue: deque[ReadableSpan] = deque()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        threading.Thread(target=self._run, name="span-export", daemon=True).start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing: spans are taken as they end."""

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopping:
            self._drops.lost(1, TIMEOUT)  # ended after the shutdown flush began
        elif len(self._queue) >= self._max_queue:
            self._drops.lost(1, QUEUE_FULL)
        else:
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            self._export_queued(math.inf)

    def _export_queued(self, deadline: float) -> None:
        """Batches until the queue is empty, or the deadline (monotonic) has passed."""
        with self._export_lock:
            while self._queue and time.monotonic() < deadline:
                batch = [self._queue.popleft() for _ in range(min(self._batch, len(self._queue)))]
                self._drops.deliver(len(batch), partial(self._export, batch))

    def _export(self, batch: list[ReadableSpan]) -> bool:
        return self._exporter.export(batch) is SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._export_queued(time.monotonic() + timeout_millis / 1000)
        return not self._queue

    def shutdown(self) -> None:
        """No more spans; the exporter stops (an OTLP exporter stops retrying)."""
        self._stopping = True
        self._wake.set()
        self._exporter.shutdown()

    def abandon(self) -> int:
        """The shutdown flush ran out: what is still queued or in flight is lost."""
        queued = len(self._queue)
        self._queue.clear()
        return self._drops.abandon(queued)


class CountingMetricExporter(MetricExporter):
    """The metric exporter, each failed export's points counted by how it failed."""

    def __init__(self, inner: MetricExporter, drops: Drops) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self.drops = drops

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        points = sum(
            len(metric.data.data_points)
            for rm in metrics_data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
        )

        def export() -> bool:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            return result is MetricExportResult.SUCCESS

        delivered = self.drops.deliver(points, export)
        return MetricExportResult.SUCCESS if delivered else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)
