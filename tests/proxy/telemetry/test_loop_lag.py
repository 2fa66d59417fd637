"""The proxy's own event-loop lag: a proxy short of CPU says so.

The proxy runs under real uvicorn (uvloop) on a thread of this process, the upstream is the
simulator in its own process; a busy loop on the proxy's event loop (the same process, the
same loop) takes most of its CPU. The TTFT the proxy measures then includes its own
queueing, and the lag it reports per request and in its histogram rises with it.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from latency_proxy.base.config import load_settings
from latency_proxy.process.app import ProxyApp
from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.instruments import Instrument
from latency_proxy.telemetry.loop_lag import BLOCK, RING, LoopLag
from loadgen.stack.processes import free_port
from tests.support.scripted_upstream import ServerThread, running

SPIN = 0.03  # the busy loop holds the proxy's loop this long
REST = 0.01  # then lets it run this long: 75% of its CPU gone
# the upstream's TTFT: longer than REST, so the first token lands in a spin (a request is
# read as a spin ends, and what it waited before that the proxy cannot see: see the docs)
UPSTREAM_TTFT = 0.02
REQUESTS = 6
MESSAGES = [{"role": "user", "content": "x"}]
BODY = {"model": "sim", "stream": True, "max_tokens": 4, "messages": MESSAGES}


class Hogged:
    """ProxyApp, and a busy loop that can be started on its event loop."""

    def __init__(self, app: ProxyApp) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None
        self.hogging = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def hog(self, on: bool) -> None:
        assert self.loop is not None
        self.hogging = on
        if on:
            self.loop.call_soon_threadsafe(self._spin)

    def _spin(self) -> None:
        if not self.hogging:
            return
        end = time.perf_counter() + SPIN
        while time.perf_counter() < end:
            pass
        assert self.loop is not None
        self.loop.call_later(REST, self._spin)


@pytest.fixture(scope="module")
def hogged() -> Iterator[tuple[str, Hogged]]:
    with running(UPSTREAM_TTFT, 0.002) as upstream:
        app = Hogged(ProxyApp(load_settings({"upstream": [upstream]}, environ={})))
        port = free_port()
        with ServerThread(app, port, loop="uvloop", http="httptools"):
            yield f"http://127.0.0.1:{port}", app


def figures(url: str, caplog: pytest.LogCaptureFixture) -> tuple[list[float], list[float]]:
    """TTFT and largest loop lag, as the proxy logged them, of REQUESTS streams in turn."""
    caplog.clear()
    for n in range(REQUESTS):
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=BODY, timeout=10,
            headers={"x-request-id": f"lag-{n}"},
        ) as response:  # fmt: skip
            assert response.status_code == 200
            response.read()
    deadline = time.monotonic() + 5
    while True:
        lines = [r.fields for r in caplog.records if r.name == "latency_proxy.access"]
        if len(lines) == REQUESTS or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(lines) == REQUESTS
    return [line["ttft_s"] for line in lines], [line["loop_lag_max_s"] for line in lines]


def slow_probes(app: ProxyApp) -> float:
    """Probes of the lag histogram that found the loop 10 ms late or more."""
    text = app.state.telemetry.exposition("text/plain")[0].decode()
    prefix = ins.LOOP_LAG.prometheus_name + "_bucket"
    buckets = {
        float(line.split('le="')[1].split('"')[0]): float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }
    below = max(le for le in buckets if le < 0.01)
    return buckets[float("inf")] - buckets[below]


def test_a_proxy_short_of_cpu_reports_its_lag_beside_the_ttft_it_adds(
    hogged, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="latency_proxy.access")
    url, app = hogged
    ttft, lag = figures(url, caplog)
    slow_before = slow_probes(app.app)
    app.hog(True)
    try:
        hog_ttft, hog_lag = figures(url, caplog)
    finally:
        app.hog(False)
    added = statistics.median(hog_ttft) - statistics.median(ttft)
    assert added > 0.005, (ttft, hog_ttft)  # the busy loop is in the TTFT the proxy measures
    assert statistics.median(hog_lag) > max(0.01, 3 * statistics.median(lag)), (lag, hog_lag)
    assert statistics.median(hog_lag) > added / 2  # the lag accounts for what was added
    assert slow_probes(app.app) - slow_before >= REQUESTS  # the histogram saw it too


@pytest.mark.parametrize("mark", [0, 5, BLOCK - 1, BLOCK, 3 * BLOCK + 7, RING + 10])
def test_the_worst_since_a_mark_is_the_largest_probe_since(mark: int) -> None:
    """The block maxima give the same answer as a scan of every probe since the mark."""
    probe = LoopLag(Instrument(ins.LOOP_LAG, CollectorRegistry(), None))
    lags = [((i * 7919) % 1000) / 1e6 for i in range(RING + 5 * BLOCK)]
    lags[mark + 2] = 0.5  # a spike after the mark
    lags[mark - 1] = 0.9  # and one before it, which must not count
    for lag in lags:
        probe.observe(lag)
    assert probe.worst_since(mark) == max(lags[max(mark, len(lags) - RING) :])
