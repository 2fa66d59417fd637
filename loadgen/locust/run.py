"""The Locust engine's bookkeeping: what a node hands on, and one run directory at the end.

Every node that runs users (a worker, or Locust's single process) keeps a `Window`
(locust/window.py: which requests count). It hands its records, its scheduling-lag samples
and, once drained, its window as a `Phase` (one per node, as loadgen's shards) to the
`Collector` — over Locust's messaging in distributed mode — which writes the run directory
with loadgen's own code (rundir, summary, report), so `loadgen compare` and `merge` read it.
Pure: no Locust, no I/O but `write`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadgen.analysis.records import Phase, Record, RunData, SummarySettings


@dataclass(frozen=True, slots=True, kw_only=True)
class Final:
    """A node's last word: its window (None: it ran no users) and what it measured with."""

    phase: Phase | None
    model: str | None = None
    prompt_sizing: dict[str, Any] | None = None
    replay: dict[str, Any] | None = None  # a replay's meta, as loadgen's run.json keeps it


@dataclass(slots=True)
class Outbox:
    """What a node has measured and not yet handed on; `batch` empties it."""

    records: list[Record] = field(default_factory=list)
    lag: list[tuple[float, float]] = field(default_factory=list)  # (epoch, lag_s)

    def batch(self, final: Final | None = None) -> dict[str, Any]:
        """A message's data (plain types, for Locust's msgpack); the last one has `final`."""
        data = {
            "records": [asdict(r) for r in self.records],
            "loop_lag": self.lag,
            "final": asdict(final) if final is not None else None,
        }
        self.records, self.lag = [], []
        return data


@dataclass(slots=True)
class Roster:
    """A replay's nodes, as the master hears from them before it starts them all at once."""

    expected: set[str]  # the nodes the test started
    indexes: dict[str, int] = field(default_factory=dict)  # node -> its Locust worker index
    files: set[str] = field(default_factory=set)  # the trace's sha256 on each node

    def ready(self, node: str, index: int, sha256: str) -> dict[str, tuple[int, int]] | None:
        """Once every node is ready, each one's share, i of N in worker-index order (as
        loadgen's shards: every Nth record); ValueError when their traces differ."""
        self.indexes[node] = index
        self.files.add(sha256)
        if len(self.files) > 1:
            raise ValueError(f"its trace differs from another node's (sha256 {sha256})")
        if not self.expected <= self.indexes.keys():
            return None
        order = sorted(self.indexes, key=lambda n: self.indexes[n])
        return {n: (i, len(order)) for i, n in enumerate(order)}


@dataclass(slots=True)
class Collector:
    """The run as the master (or the single process) receives it from its nodes."""

    records: list[Record] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    loop_lag: list[tuple[float, float]] = field(default_factory=list)
    finals: dict[str, Final] = field(default_factory=dict)  # node -> its last word

    def add(self, node: str, batch: dict[str, Any]) -> None:
        self.records.extend(Record.from_dict(r) for r in batch["records"])
        self.loop_lag.extend((at, lag) for at, lag in batch["loop_lag"])
        if (final := batch["final"]) is not None:
            phase = Phase(**final["phase"]) if final["phase"] is not None else None
            self.finals[node] = Final(**final | {"phase": phase})
            if phase is not None:
                self.phases.append(phase)

    def run_data(self, settings: SummarySettings, meta: dict[str, Any]) -> RunData:
        return RunData(
            records=sorted(self.records, key=lambda r: r.intended_at),
            phases=sorted(self.phases, key=lambda p: p.start_at),
            loop_lag=sorted(self.loop_lag),
            settings=settings,
            meta=meta,
        )


def write(out: str | Path, data: RunData) -> dict[str, Any]:
    """requests.jsonl, run.json, summary.json and report.md, as loadgen writes them."""
    # imported here: only the collecting process writes, and report's matplotlib would add
    # a second to every worker's start
    from loadgen.analysis.summary import summarize_run
    from loadgen.reports import comparison
    from loadgen.reports import run as report
    from loadgen.runs import rundir

    summary = summarize_run(data)
    report.write(rundir.write(out, data, summary), data, summary, comparison.of_run(data, summary))
    return summary
