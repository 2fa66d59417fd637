"""The supervisor's /metrics: every worker's store summed into the instruments one process
would have, so the page is the one a single process would write for the same traffic.

Label sets come in the order they were first used in any worker (a store records when),
as one process lists them; a histogram bucket's exemplar is the latest any worker set. A
dead worker's counters and histograms stay in the sum (what it counted happened); its
gauges do not (its requests are no longer in flight).
"""

from __future__ import annotations

from collections.abc import Iterable
from mmap import mmap

import prometheus_client
from prometheus_client.samples import Exemplar

from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.worker_store import Read, read


def summed(live: Iterable[mmap], dead: Iterable[mmap], specs: dict[str, ins.Spec]) -> list[Read]:
    """Each label set's values over the stores, in first-use order."""
    total: dict[tuple[str, tuple[str, ...]], Read] = {}
    stores = [(data, True) for data in live] + [(data, False) for data in dead]
    for data, alive in stores:
        for record in read(data):
            spec = specs.get(record.name)
            if spec is None or (spec.kind == "updown" and not alive):
                continue
            key = (record.name, record.labels)
            known = total.get(key)
            if known is None:
                total[key] = record
                continue
            known.created = min(known.created, record.created)
            known.values = [a + b for a, b in zip(known.values, record.values, strict=True)]
            known.exemplars = [
                _later(a, b) for a, b in zip(known.exemplars, record.exemplars, strict=True)
            ]
    return sorted(total.values(), key=lambda record: record.created)


def _later(a: Exemplar | None, b: Exemplar | None) -> Exemplar | None:
    if a is None or (b is not None and b.timestamp > a.timestamp):
        return b
    return a


def registry(
    live: Iterable[mmap], dead: Iterable[mmap], latest: bool, restarts: int
) -> prometheus_client.CollectorRegistry:
    """A registry holding the workers' sum, and the restarts the supervisor counted."""
    into = prometheus_client.CollectorRegistry(auto_describe=True)
    specs = {spec.name: spec for spec in ins.active(latest)}
    built = {name: ins.Instrument(spec, into, None) for name, spec in specs.items()}
    for record in summed(live, dead, specs):
        built[record.name].load(record.labels, record.values, record.exemplars)
    if restarts:
        built[ins.WORKER_RESTARTS.name].record(restarts, ())
    return into
