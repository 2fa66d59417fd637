"""A Prometheus histogram that takes a request's values in one call.

prometheus_client's Histogram observes one value per call: a lock for the sum, a linear scan
of the bounds, a lock for the bucket. A stream's inter-token gaps are ~60 values a request,
so that was most of recording one. Here a request's values go in with one call (a bisect per
value into plain lists, no lock: every write comes from the event loop's thread), and the
collector yields exactly the samples prometheus_client's Histogram would for the same
values in the same order — the same names, labels, float values, sum (added one value at a
time, in order, so even its rounding is the same) and exemplar (the largest value of the
call carries it, on its bucket) — so /metrics is byte-identical
(tests/proxy/telemetry/test_histogram.py compares the two expositions).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

INF = float("inf")


def with_inf(bounds: Iterable[float]) -> tuple[float, ...]:
    """The upper bounds as floats, ending with +Inf."""
    bounded = [float(b) for b in bounds]
    if not bounded or bounded[-1] != INF:
        bounded.append(INF)
    return tuple(bounded)


class Series:
    """One label set's buckets (per bucket, not cumulative), sum and latest exemplars."""

    __slots__ = ("bounds", "counts", "exemplars", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.exemplars: list[Exemplar | None] = [None] * len(bounds)
        self.sum = 0.0

    def observe(self, values: Sequence[float], trace_id: str | None = None) -> None:
        """Add every value; with trace_id, the largest one's bucket takes it as exemplar."""
        bounds, counts = self.bounds, self.counts
        total = self.sum
        for value in values:
            total += value
            if value == value:  # NaN falls in no bucket, as in prometheus_client
                counts[bisect_left(bounds, value)] += 1
        self.sum = total
        if trace_id is not None and values:
            top = max(values)
            if top == top:
                self.exemplars[bisect_left(bounds, top)] = Exemplar(
                    {"trace_id": trace_id}, top, time.time()
                )


class Histogram(Collector):
    """A labelled histogram family registered in a registry, like prometheus_client's."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label_names: Sequence[str],
        bounds: Iterable[float],
        registry: CollectorRegistry,
        unit: str = "",
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._unit = unit
        self._label_names = tuple(label_names)
        self._bounds = with_inf(bounds)
        self._le = tuple(floatToGoString(b) for b in self._bounds)
        self._series: dict[tuple[str, ...], Series] = {}
        if not self._label_names:
            self.labels()
        registry.register(self)

    def labels(self, *values: str) -> Series:
        """The series of one label set (created on first use, kept in first-use order)."""
        if len(values) != len(self._label_names):
            raise ValueError(f"{self._name} takes labels {self._label_names}, got {values}")
        key = tuple(str(v) for v in values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series(self._bounds)
        return series

    def describe(self) -> Iterable[Metric]:
        return [Metric(self._name, self._documentation, "histogram", self._unit)]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self._name, self._documentation, "histogram", self._unit)
        bucket, count, total = self._name + "_bucket", self._name + "_count", self._name + "_sum"
        for key, series in list(self._series.items()):
            labels = dict(zip(self._label_names, key, strict=True))
            acc = 0.0
            for le, n, exemplar in zip(self._le, series.counts, series.exemplars, strict=True):
                acc += n
                metric.add_sample(bucket, {**labels, "le": le}, acc, None, exemplar)
            metric.add_sample(count, labels, acc)
            if self._bounds[0] >= 0:
                metric.add_sample(total, labels, series.sum)
        return [metric]
