"""The supervisor's /metrics is the sum of its workers' stores: byte for byte what one
process writes for the same observations, exemplars included, and a dead worker's counts
neither lost nor counted twice."""

from __future__ import annotations

import os
import time
from pathlib import Path

import prometheus_client
import pytest

from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.providers import exposition
from latency_proxy.telemetry.worker_store import Read, Store, records
from latency_proxy.workers import merged

OPENMETRICS = "application/openmetrics-text"
LABELS = ("chat", "m", "default")
# (instrument, labels, values, trace id): values are multiples of 1/64, so every sum is
# exact whatever order it is added in
TRAFFIC = [
    (ins.TTFT, LABELS, [0.125], "a" * 32),
    (ins.REQUESTS, (*LABELS, "200", "ok"), [1], None),
    (ins.ACTIVE, LABELS, [1], None),
    (ins.TIME_PER_OUTPUT_CHUNK, LABELS, [0.015625, 0.03125, 0.5], "b" * 32),
    (ins.TTFT, ("chat", "other", "default"), [2.0], "c" * 32),
    (ins.REQUESTS, (*LABELS, "502", "upstream_error"), [1], None),
    (ins.ACTIVE, LABELS, [-1], None),
    (ins.TTFT, LABELS, [0.25], "d" * 32),
    (ins.LOOP_LAG, (), [0.0078125], None),
    (ins.ACTIVE, LABELS, [1], None),
    (ins.REQUESTS, (*LABELS, "200", "ok"), [1], None),
]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.time() as the test sets it: the same instants on both sides."""
    now = [1_700_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def one_process(clock: list[float]) -> bytes:
    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    built = {spec.name: ins.Instrument(spec, registry, None) for spec in ins.active(False)}
    for step, (spec, labels, values, trace_id) in enumerate(TRAFFIC):
        clock[0] = 1_700_000_000.0 + step
        built[spec.name].record_all(values, labels, trace_id)
    return exposition(registry, OPENMETRICS)[0]


def workers(clock: list[float], tmp_path: Path, count: int) -> list[list[Read]]:
    """The same traffic spread over `count` workers' stores, in turn (as the supervisor
    reads them)."""
    clock[0] = 1_699_999_999.0  # the stores' unlabelled series, created at start
    paths = [tmp_path / f"worker-{n}" for n in range(count)]
    built = []
    for path in paths:
        store = Store(path)
        built.append({s.name: ins.Instrument(s, prometheus_client.CollectorRegistry(), None, store)
                      for s in ins.active(False)})  # fmt: skip
    for step, (spec, labels, values, trace_id) in enumerate(TRAFFIC):
        clock[0] = 1_700_000_000.0 + step
        built[step % count][spec.name].record_all(values, labels, trace_id)
    return [read_store(path) for path in paths]


def read_store(path: Path) -> list[Read]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return records(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_sum_of_the_workers_is_what_one_process_writes(clock, tmp_path, count) -> None:
    expected = one_process(clock)
    paths = workers(clock, tmp_path, count)
    summed = exposition(merged.Merged(False).registry(paths, 0), OPENMETRICS)[0]
    assert summed == expected
    assert b'trace_id="dddd' in summed  # an exemplar from the second worker's store


def test_a_dead_workers_counts_stay_and_its_requests_in_flight_go(clock, tmp_path) -> None:
    live, dead = workers(clock, tmp_path, 2)  # in turn: the dead one has a request in flight
    sums = merged.Merged(False)
    sums.fold_dead(dead)
    page = exposition(sums.registry([live], 1), "text/plain")[0].decode()
    assert exposition(sums.registry([live], 1), "text/plain")[0].decode() == page  # not twice
    lines = dict(line.rsplit(" ", 1) for line in page.splitlines() if not line.startswith("#"))
    ok = 'latency_proxy_requests_total{gen_ai_operation_name="chat",gen_ai_request_model="m",'
    ok += 'http_response_status_code="200",latency_proxy_route="default",outcome="ok"}'
    assert float(lines[ok]) == 2.0  # one counted by each: the dead one's kept, not doubled
    active = 'latency_proxy_requests_active{gen_ai_operation_name="chat",'
    active += 'gen_ai_request_model="m",latency_proxy_route="default"}'
    assert float(lines[active]) == 0.0  # the live one's +1 -1; the dead one's +1 gone
    everything = exposition(merged.Merged(False).registry([live, dead], 0), "text/plain")[0]
    assert f"{active} 1.0".encode() in everything  # while it lived, it was counted
    assert float(lines["latency_proxy_worker_restarts_total"]) == 1.0
