"""The one-call histogram exposes exactly what prometheus_client's Histogram would.

The reference below is the implementation it replaced: prometheus_client.Histogram, one
observe() per value, the largest value of a request carrying the exemplar. The same scripted
requests go through the proxy's MetricsWriter twice, once per implementation, and both
/metrics bodies (text 0.0.4 and OpenMetrics with exemplars) must be byte-identical.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import orjson
import prometheus_client
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind
from prometheus_client.openmetrics import exposition as openmetrics

from latency_proxy.base.config import Route
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import SSEParser
from latency_proxy.record.exchange import Exchange
from latency_proxy.record.model_call import ModelCall
from latency_proxy.record.outcome import Outcome, UpstreamErrorKind
from latency_proxy.telemetry import instruments
from latency_proxy.telemetry.histogram import Histogram
from latency_proxy.telemetry.metrics import MetricsWriter
from latency_proxy.telemetry.providers import Telemetry


class ReferenceHistogram:
    """prometheus_client's Histogram behind the interface Instrument uses."""

    def __init__(self, name, documentation, label_names, bounds, registry, unit="") -> None:
        self._family = prometheus_client.Histogram(
            name, documentation, label_names, registry=registry, buckets=bounds, unit=unit
        )

    def labels(self, *values: str) -> ReferenceSeries:
        return ReferenceSeries(self._family.labels(*values))


class ReferenceSeries:
    def __init__(self, child) -> None:
        self._child = child

    def observe(self, values: Sequence[float], trace_id: str | None = None) -> None:
        top = max(range(len(values)), key=values.__getitem__) if trace_id else -1
        for i, value in enumerate(values):
            self._child.observe(value, {"trace_id": trace_id} if i == top else None)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    """Exemplars carry the wall-clock time of their observation: make it one instant."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)


def expositions(registry) -> tuple[bytes, bytes]:
    return prometheus_client.generate_latest(registry), openmetrics.generate_latest(registry)


def chat_stream(gaps: Sequence[float], usage_per_chunk: bool) -> list[tuple[float, bytes]]:
    """(arrival time, bytes) of a vLLM-like chat stream whose content events are `gaps` apart."""

    def event(delta: dict, **extra) -> bytes:
        choice = {"index": 0, "delta": delta, **extra}
        return b"data: " + orjson.dumps({"id": "c", "model": "m", "choices": [choice]}) + b"\n\n"

    reads = [(0.010, event({"role": "assistant"}))]
    t = 0.050
    for i, gap in enumerate([0.0, *gaps]):
        t += gap
        data = event({"content": f"t{i}"})
        if usage_per_chunk:
            usage = {"prompt_tokens": 5, "completion_tokens": i + 1}
            data = data[:-3] + b',"usage":' + orjson.dumps(usage) + b"}\n\n"
        reads.append((t, data))
    reads.append((t + 0.001, event({}, finish_reason="stop") + b"data: [DONE]\n\n"))
    return reads


def scripted_exchanges(telemetry: Telemetry) -> list[tuple[Exchange, object, str | None]]:
    """Streams and plain answers, sampled and not, ok and failed, two routes."""
    routes = [Route("m", "http://127.0.0.1:9"), Route("n", "http://127.0.0.1:9")]
    out = []
    plans = [
        ([0.011, 0.009, 0.0004, 0.25, 0.01], True, "a" * 32, Outcome.OK, None),
        ([0.02] * 40 + [1.5], False, "b" * 32, Outcome.OK, None),
        ([0.004, 0.004], False, None, Outcome.OK, None),  # not sampled: no exemplar
        ([], True, "c" * 32, Outcome.UPSTREAM_ERROR, UpstreamErrorKind.STATUS),
        ([0.003 * k for k in range(1, 70)], True, "d" * 32, Outcome.OK, None),
    ]
    for n, (gaps, usage, trace_id, outcome, kind) in enumerate(plans):
        span = telemetry.tracing.start("s", None, SpanKind.SERVER, {}, 0)
        exchange = Exchange(f"r{n}", "POST", "/v1/chat/completions", 100.0, 0, span)
        exchange.call = ModelCall("chat", b"{}", model="m", stream=True)
        exchange.route = routes[n % 2]
        exchange.status = 200 if kind is None else 502
        exchange.outcome = outcome
        exchange.upstream_error_kind = kind
        exchange.t_upstream_call = 100.0 + 0.0003 * (n + 1)
        exchange.overhead_event_sum, exchange.overhead_events = 0.00002 * len(gaps), len(gaps)
        meter, parser = StreamMeter(100.0), SSEParser()
        for t, data in chat_stream(gaps, usage):
            for event in parser.feed(data):
                meter.on_event(100.0 + t, event)
        timing = meter.finish(100.0 + 0.06 + sum(gaps))
        out.append((exchange, timing, trace_id))
    # a non-streaming answer: duration, tokens and overheads only
    span = telemetry.tracing.start("s", None, SpanKind.SERVER, {}, 0)
    plain = Exchange("plain", "POST", "/v1/chat/completions", 100.0, 0, span)
    plain.call = ModelCall("chat", b"{}", model="m", stream=False)
    plain.route, plain.status = routes[0], 200
    plain.t_upstream_call = 100.0002
    meter = StreamMeter(100.0)
    meter.on_body(b'{"id":"x","model":"m","usage":{"prompt_tokens":3,"completion_tokens":1}}')
    out.append((plain, meter.finish(100.07), "e" * 32))
    return out


def record_everything(monkeypatch, histogram_class) -> tuple[bytes, bytes]:
    monkeypatch.setattr(instruments, "Histogram", histogram_class)
    telemetry = Telemetry(["m", "n"], env={})
    writer = MetricsWriter(telemetry)
    for exchange, timing, trace_id in scripted_exchanges(telemetry):
        writer.record(exchange, timing, trace_id)
    return expositions(telemetry.registry)


def test_metrics_are_byte_identical_to_prometheus_clients_for_the_same_traffic(
    monkeypatch,
) -> None:
    ours = record_everything(monkeypatch, Histogram)
    reference = record_everything(monkeypatch, ReferenceHistogram)
    text, open_metrics = ours
    assert b"latency_proxy_tokens_per_chunk_bucket" in text  # the scripted traffic reached it
    assert b'# {trace_id="dddddddddddddddddddddddddddddddd"}' in open_metrics
    assert text == reference[0]
    assert open_metrics == reference[1]


values = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=400, allow_nan=False),
        st.sampled_from([0.0, 0.001, 0.0015, 0.3, 300.0, 1e-12, math.inf]),
    ),
    max_size=80,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(values, st.sampled_from(["x", "y"]), st.booleans()), min_size=1, max_size=6
    )
)
def test_any_values_in_any_batches_expose_as_prometheus_client_would(batches) -> None:
    bounds = (0.001, 0.0015, 0.01, 0.3, 7.0, 300.0)
    registries = prometheus_client.CollectorRegistry(), prometheus_client.CollectorRegistry()
    ours = Histogram("h_seconds", "doc", ("k",), bounds, registries[0], "seconds")
    reference = ReferenceHistogram("h_seconds", "doc", ("k",), bounds, registries[1], "seconds")
    for batch, label, sampled in batches:
        if batch:
            trace_id = "f" * 32 if sampled else None
            ours.labels(label).observe(batch, trace_id)
            reference.labels(label).observe(batch, trace_id)
    assert expositions(registries[0]) == expositions(registries[1])
