"""The supervisor's /metrics: every worker's store summed into the instruments one process
would have, so the page is the one a single process would write for the same traffic.

Label sets come in the order they were first used in any worker (a store records when),
as one process lists them; a histogram bucket's exemplar is the latest any worker set. A
dead worker's counters and histograms stay in the sum (what it counted happened): they
are folded in once, when it ends, and its store let go; its gauges do not (its requests
are no longer in flight).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import prometheus_client
from prometheus_client.samples import Exemplar

from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.worker_store import Read

Sums = dict[tuple[str, tuple[str, ...]], Read]


class Merged:
    """The workers' sums: what dead workers counted, kept, and the live ones' stores added
    to it at each scrape."""

    def __init__(self, latest: bool) -> None:
        self._specs = {spec.name: spec for spec in ins.active(latest)}
        self._dead: Sums = {}

    def fold_dead(self, store: Iterable[Read]) -> None:
        """A dead worker's counts, kept for good; its store may go."""
        _add(self._dead, store, self._specs, alive=False)

    def registry(
        self, live: Iterable[Iterable[Read]], restarts: int
    ) -> prometheus_client.CollectorRegistry:
        """A registry holding the workers' sum, and the restarts the supervisor counted."""
        total = {key: _copy(record) for key, record in self._dead.items()}
        for store in live:
            _add(total, store, self._specs, alive=True)
        into = prometheus_client.CollectorRegistry(auto_describe=True)
        built = {name: ins.Instrument(spec, into, None) for name, spec in self._specs.items()}
        for record in sorted(total.values(), key=lambda record: record.created):
            built[record.name].load(record.labels, record.values, record.exemplars)
        if restarts:
            built[ins.WORKER_RESTARTS.name].record(restarts, ())
        return into


def _add(total: Sums, store: Iterable[Read], specs: dict[str, ins.Spec], alive: bool) -> None:
    """One store's label sets added into `total`."""
    for record in store:
        spec = specs.get(record.name)
        if spec is None or (spec.kind == "updown" and not alive):
            continue
        key = (record.name, record.labels)
        known = total.get(key)
        if known is None:
            total[key] = _copy(record)
            continue
        known.created = min(known.created, record.created)
        known.values = [a + b for a, b in zip(known.values, record.values, strict=True)]
        known.exemplars = [
            _later(a, b) for a, b in zip(known.exemplars, record.exemplars, strict=True)
        ]


def _copy(record: Read) -> Read:
    """A record the sums may add into (they replace its fields), leaving the one it came
    from as it was."""
    return dataclasses.replace(record)


def _later(a: Exemplar | None, b: Exemplar | None) -> Exemplar | None:
    if a is None or (b is not None and _set_at(b) > _set_at(a)):
        return b
    return a


def _set_at(exemplar: Exemplar) -> float:
    """When an exemplar was set; one without a time counts as the oldest."""
    return -math.inf if exemplar.timestamp is None else float(exemplar.timestamp)
