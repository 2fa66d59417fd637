"""The Locust engine's bookkeeping: which requests count, and one run directory at the end.

Every node that runs users (a worker, or Locust's single process) keeps a `Window`: as in
loadgen's blocks (runner._Budget), a request intended during the warmup is excluded
("warmup"); when the test stops, the window closes, the users keep sending (excluded as
"cooldown") until every measured request has finished, so the last ones see the same load
as the others rather than a draining server. The node hands its records, its scheduling-lag
samples and, once drained, its window as a `Phase` (one per node, as loadgen's shards) to the
`Collector` — over Locust's messaging in distributed mode — which writes the run directory
with loadgen's own code (rundir, summary, report), so `loadgen compare` and `merge` read it.
Pure: no Locust, no I/O but `write`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadgen.measurement import Clock
from loadgen.records import Phase, Record, RunData, SummarySettings


class Window:
    """One node's measured window, in perf_counter seconds."""

    def __init__(self, start: float, warmup_s: float) -> None:
        self.start = start
        self.warm_end = start + warmup_s
        self.closed_at: float | None = None
        self.sealed = False  # no request may start any more
        self.in_flight = 0  # measured requests not finished yet
        self.busy = 0  # requests of any kind not finished yet
        self.done_at: float | None = None  # when the last measured one finished

    def take(self, intended: float) -> str | None:
        """Claim a request intended at this time: "warmup", None (measured) or "cooldown"."""
        assert not self.sealed, "a sealed window takes no request"
        self.busy += 1
        if intended < self.warm_end:
            return "warmup"
        if self.closed_at is not None and intended >= self.closed_at:
            return "cooldown"
        self.in_flight += 1
        return None

    def finished(self, excluded: str | None, end: float) -> None:
        self.busy -= 1
        if excluded is None:
            self.in_flight -= 1
            self.done_at = max(end, self.done_at or end)

    def close(self, at: float) -> None:
        """The test is stopping: nothing intended from now on is measured."""
        if self.closed_at is None:
            self.closed_at = max(at, self.warm_end)

    @property
    def drained(self) -> bool:
        """Closed, and no measured request is in flight: time to seal."""
        return self.closed_at is not None and self.in_flight == 0

    @property
    def idle(self) -> bool:
        """Sealed, and nothing is in flight: every request is a record."""
        return self.sealed and self.busy == 0

    def phase(self, target: str, clock: Clock) -> Phase:
        assert self.closed_at is not None, "a window becomes a phase once closed"
        return Phase(
            target=target,
            block=0,
            start_at=clock.epoch(self.warm_end),
            end_at=clock.epoch(self.closed_at),
            done_at=clock.epoch(self.done_at or self.closed_at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Final:
    """A node's last word: its window (None: it ran no users) and what it measured with."""

    phase: Phase | None
    model: str | None = None
    prompt_sizing: dict[str, Any] | None = None


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
    from loadgen import compare, report, rundir
    from loadgen.summary import summarize_run

    summary = summarize_run(data)
    rundir.write(out, data, summary)
    report.write(out, data, summary, compare.of_run(data, summary))
    return summary
