"""A telemetry sink that misbehaves (never answers, answers late, garbage, 500, is not
there): every span that does not reach it is counted by why, and shutdown takes at most
the flush bound whatever it does. Against a real OTLP receiver and the proxy's process."""

from __future__ import annotations

import re
import signal
import time

import httpx
import pytest

from latency_proxy.process.app import FLUSH_TIMEOUT
from loadgen.stack.processes import free_port
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.proxy import proxy_env

SPANS_PER_CALL = 2  # SERVER and CLIENT
QUEUE, BATCH = 20, 10


def dropped(proxy, signal_name: str = "traces") -> dict[str, float]:
    found = re.findall(
        rf'latency_proxy_telemetry_dropped_total\{{error_type="(\w+)",signal="{signal_name}"\}} '
        r"(\S+)",
        proxy.metrics(),
    )
    return {reason: float(value) for reason, value in found}


def model_calls(proxy, count: int) -> None:
    with httpx.Client(timeout=10) as client:
        for _ in range(count):
            r = client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "x"})
            assert r.status_code == 200


def test_a_healthy_sink_gets_two_spans_per_call_and_nothing_is_dropped(start_proxy, upstream):
    """The count the fault tests below expect, from a sink that works."""
    with OTLPReceiver() as rx:
        env = proxy_env(rx, OTEL_METRICS_EXPORTER="none")
        proxy = start_proxy("--upstream", upstream.url, env=env)
        model_calls(proxy, 10)
        rx.wait_for_spans(lambda spans: len(spans) >= 10 * SPANS_PER_CALL, timeout=5)
        time.sleep(0.3)  # anything more would have come by now
        assert len(rx.spans()) == 10 * SPANS_PER_CALL
        assert sum(dropped(proxy).values()) == 0


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("never", "timeout"),
        ("500", "export_failed"),
        pytest.param("garbage", "export_failed", marks=pytest.mark.slow),
    ],
)
def test_every_span_the_sink_does_not_take_is_counted_by_why(
    start_proxy, upstream, behaviour: str, reason: str
) -> None:
    calls = 30
    with OTLPReceiver() as rx:
        rx.set_behaviour(behaviour)
        env = proxy_env(
            rx,
            OTEL_METRICS_EXPORTER="none",
            OTEL_EXPORTER_OTLP_TIMEOUT="0.5",
            OTEL_BSP_MAX_QUEUE_SIZE=str(QUEUE),
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE=str(BATCH),
        )
        proxy = start_proxy("--upstream", upstream.url, env=env)
        model_calls(proxy, calls)
        spans = calls * SPANS_PER_CALL
        if behaviour == "never":
            # past the queue and the batch in flight: counted at once, not at the next export
            assert dropped(proxy).get("queue_full", 0) >= spans - QUEUE - 2 * BATCH
        deadline = time.monotonic() + 5
        while sum(dropped(proxy).values()) < spans and time.monotonic() < deadline:
            time.sleep(0.1)
        counts = dropped(proxy)
        assert sum(counts.values()) == spans, counts  # every span, once
        assert counts.get(reason, 0) > 0, counts
        assert rx.request_count > 0 and rx.spans() == []


SINKS = ["ok", "never", "late", "garbage", "500", "nothing listening"]


@pytest.mark.slow
@pytest.mark.parametrize("sink", SINKS)
def test_shutdown_takes_at_most_the_flush_bound_whatever_the_sink(
    start_proxy, upstream, sink: str
) -> None:
    """With the exporters' own timeout (10 s) left as it is, spans queued and a metric
    export in flight: SIGTERM at idle exits within the flush bound."""
    with OTLPReceiver() as rx:
        if sink == "late":
            rx.set_behaviour("late", delay=30)
        elif sink not in ("ok", "nothing listening"):
            rx.set_behaviour(sink)
        endpoint = f"http://127.0.0.1:{free_port()}" if sink == "nothing listening" else None
        env = proxy_env(rx, OTEL_BSP_SCHEDULE_DELAY="60000", OTEL_METRIC_EXPORT_INTERVAL="500")
        del env["OTEL_EXPORTER_OTLP_TIMEOUT"]
        if endpoint:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        proxy = start_proxy("--upstream", upstream.url, env=env)
        model_calls(proxy, 20)
        time.sleep(1.0)  # a metric export is under way
        started = time.monotonic()
        code = proxy.stop(signal.SIGTERM)
        took = time.monotonic() - started
        print(f"shutdown with sink {sink!r}: {took:.2f} s")
        assert code == 0
        assert took < FLUSH_TIMEOUT + 1.5, took
        if sink in ("never", "late"):
            assert re.search(r"exiting without it: \d+ spans", proxy.output())
