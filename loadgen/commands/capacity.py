"""`python -m loadgen capacity`: per target, the most load at which every SLO holds, steady.

Each probe is one ordinary run (run.measure) of one target at one level, a
`dataclasses.replace` of the command's RunConfig, in its own run directory beside
capacity.json, with its own arrival seed; the embedded stack, when asked for, is started
once for all of them. A probe warms up until the level's steady state (analysis/settle.py) and then
measures a window of at least WINDOW_E2ES request durations and as many requests as the
SLOs' percentiles need. An undecided probe (capacity/verdict.py) is run again at once with twice the
window and warm-up cap (a replay: twice the trace window), up to MAX_EXTENSIONS times; by
speed, every later probe then replays that wider window, so all levels see the same requests.
Targets take turns level by level
(A, B, A, B …), so drift in shared hardware hits all alike. The search (capacity/search.py) stops
when every bracket is narrow enough, when the next probe would not fit in the budget, or at
Ctrl-C; `--repeat N` then re-runs each bracket's ends with new seeds. Whatever was found is
written either way (reports/capacity.py).

A search of virtual: targets runs every probe on the simulator's virtual clock (run.measure
predicts it; engine/virtual_settle.py settles its warm-up), with VIRTUAL_REQUESTS times the
requests; its targets are all virtual (checked before any probe), and what predicted each
one is kept for capacity.json and the sentence (capacity/advice.py).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from loadgen import replay
from loadgen.analysis import steady
from loadgen.analysis.settle import Settle
from loadgen.capacity.axis import AXES, Axis
from loadgen.capacity.search import PRECISION, Search, probe_requests
from loadgen.capacity.verdict import FAILS, UNDECIDED, verdict
from loadgen.commands import run
from loadgen.drivers.virtual import drive as drive_virtual
from loadgen.engine import virtual
from loadgen.engine.targets import VIRTUAL, load_file, resolve
from loadgen.reports import capacity as capacity_report
from loadgen.runs.config import RunConfig
from loadgen.stack import embedded

PROBE_METRICS = ("ttft_s", "tpot_s", "e2e_s")
WINDOW_E2ES = 10  # a probe's window lasts at least this many typical request durations
SETTLE_MAX_S = 30.0  # its warm-up waits this long at most for the in-flight count to settle
MAX_WINDOW_S = 120.0  # its window lasts at most this long (a saturated server's E2E grows)
MAX_EXTENSIONS = 2  # an undecided probe is run again this many times at most, 2x longer each
SEED_STRIDE = 10_000  # probe n's arrival seed: --seed x SEED_STRIDE + n


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityConfig:
    by: str  # a key of AXES
    start: float  # the first level probed
    budget_s: float
    floor: float | None = None  # --floor: halve down to this level (None: start / 8)
    ceiling: float | None = None  # --ceiling: double up to this level (None: no end)
    probe_requests: int | None  # --requests: per probe and target (None: what the SLOs need)
    min_probe_s: float | None  # --duration: probes' windows last at least this long
    repeat: int = 0  # re-run each final bracket's ends this many times with new seeds
    probe_pngs: bool = True  # each probe's report.md with its PNG charts


class _OutOfBudget(Exception):
    """The next probe would end past the budget."""


def main(config: RunConfig, capacity: CapacityConfig) -> int:
    """Search, write, print the table and the sentence; 0, 2 for bad input, 130 interrupted."""
    try:
        result = search(config, capacity)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"loadgen capacity: {exc}", file=sys.stderr)
        return 2
    capacity_report.write(config.out, result)
    print(capacity_report.console(result))
    print(f"results: {config.out}/ (capacity.json, report.md, report.html, probe-*/)")
    return 130 if result["stopped"] == "interrupted" else 0


def search(config: RunConfig, capacity: CapacityConfig) -> dict[str, Any]:
    """The whole search, the embedded stack started first (and stopped last) when asked for."""
    predicted = _virtual(config)
    if capacity.by == "speed":
        n = window_requests(config, capacity.start)
    else:
        n = probe_requests(config.summary.slos, capacity.probe_requests, predicted)
    if not config.embedded:
        return _search(config, capacity, n)
    with embedded.stack(config.out / "embedded") as stack:
        return _search(run.on_stack(config, stack), capacity, n)


@dataclass(slots=True)
class _Prober:
    """Runs probes: numbers them, seeds them, sizes them, keeps their entries and the time."""

    config: RunConfig
    capacity: CapacityConfig
    axis: Axis
    requests: int
    names: dict[str, str]  # spec -> target name
    began: float = field(default_factory=time.monotonic)
    number: int = 0
    probes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)  # spec -> its last probe's seconds
    predicted: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its twin
    # --by speed: the widest trace window a probe needed so far; every later probe, of any
    # target, replays that window, so all levels are judged on the same requests
    widest: int = 0
    # --by speed: the trace's window at each width, read once (a probe asks several times)
    windows: dict[int, replay.Replay] = field(default_factory=dict)

    def judge(self, spec: str, level: float, search: Search) -> None:
        """Probe the level, extended while undecided (up to the cap); record its outcome
        before saying it, so that a Ctrl-C after the line keeps the verdict."""
        extension = self.widest if self.axis.name == "speed" else 0
        extends = None
        while True:
            probe = self.probe(spec, level, extension, extends=extends, budgeted=True)
            last = extension == MAX_EXTENSIONS or not self._grows(extension + 1)
            if probe["outcome"] != UNDECIDED or last:
                search.record(level, probe["outcome"])
                capacity_report.judged(probe)
                return
            probe["extended"] = True
            capacity_report.judged(probe)
            extension, extends = extension + 1, probe["number"]
            if self.axis.name == "speed":
                self.widest = max(self.widest, extension)

    def probe(
        self,
        spec: str,
        level: float,
        extension: int,
        *,
        extends: int | None = None,
        repeat: int | None = None,
        budgeted: bool = False,
    ) -> dict[str, Any]:
        scale = 2**extension
        if budgeted and self.elapsed + self.wall.get(spec, 0.0) * scale > self.capacity.budget_s:
            raise _OutOfBudget
        self.number += 1
        name, requests = self.names[spec], self._size(extension)
        capacity_report.announce(self.number, name, self.axis, level, requests, extends, repeat)
        probe_config = self._config(spec, level, requests, scale)
        started = time.monotonic()
        summary = run.measure(probe_config, pngs=self.capacity.probe_pngs)
        self.wall[spec] = (time.monotonic() - started) / scale
        probe = _probe(level, self.number, summary["targets"][name], summary, self.config)
        probe["sessions_per_min"] = self._sessions(level, scale)
        if "virtual" in summary:  # the twin that predicted it, without its per-run counts
            twin = {k: v for k, v in summary["virtual"].items() if k != "requests_per_replica"}
            self.predicted[name] = twin
        probe.update(
            run_dir=probe_config.out.name,
            seed=probe_config.summary.seed,
            extension=extension,
            extends=extends,
            extended=False,
            repeat=repeat,
        )
        earlier = self.probes.setdefault(spec, [])
        earlier.append(probe)
        if not self.axis.open_loop:
            _queueing(probe, earlier)
        if summary["interrupted"]:
            raise KeyboardInterrupt
        return probe

    def _size(self, extension: int) -> int:
        """At least how many requests a probe so extended measures: a replay's, its window's
        (an extension widens the trace window, not only the time)."""
        scale = 2**extension
        if self.axis.name != "speed":
            return self.requests * scale
        return len(self._window(scale).arrivals)

    def _sessions(self, level: float, scale: int) -> float | None:
        """--by speed over an agents' trace: the sessions its window starts a minute at this
        speed (None for another axis, or a trace without sessions)."""
        if self.axis.name != "speed":
            return None
        return replay.sessions.per_minute(self._window(scale).arrivals, level)

    def _window(self, scale: int) -> replay.Replay:
        if scale not in self.windows:
            self.windows[scale] = _window(self.config, scale)
        return self.windows[scale]

    def _grows(self, extension: int) -> bool:
        """An extension would measure more: a replay's window that holds the whole trace
        cannot widen, and the same records again would decide nothing."""
        return self.axis.name != "speed" or self._size(extension) > self._size(extension - 1)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def _config(self, spec: str, level: float, requests: int, scale: int) -> RunConfig:
        """Probe `number`: one target at one level, its own seed and directory."""
        base, name = self.config, self.names[spec]
        slug = "".join(c if c.isalnum() or c in "-." else "_" for c in name)
        seed = replace(base.summary, seed=base.summary.seed * SEED_STRIDE + self.number)
        if self.axis.name == "speed":  # the whole trace window at one speed: its own length
            return replace(
                _speed_probe(base, level, scale),
                out=base.out / f"probe-{self.number:02d}-{slug}-{level:g}x",
                command=f"{base.command}  # probe {self.number}: {name} at speed {level:g}",
                targets=(spec,),
                blocks=1,
                summary=seed,
            )
        window = self.capacity.min_probe_s
        return replace(
            base,
            out=base.out / f"probe-{self.number:02d}-{slug}-{level:g}",
            command=f"{base.command}  # probe {self.number}: {name} at {self.axis.name} {level:g}",
            targets=(spec,),
            sweep=self.axis.sweep,
            levels=(level,),
            requests=requests,
            duration_s=window * scale if window else None,
            settle=Settle(
                max_s=max(base.warmup_s, SETTLE_MAX_S) * scale,
                window_e2es=WINDOW_E2ES * scale,
                max_window_s=MAX_WINDOW_S * scale,
            ),
            blocks=1,
            summary=seed,
        )


def _speed_probe(base: RunConfig, speed: float, scale: int) -> RunConfig:
    """The trace's window (`scale` times as wide) replayed `speed` times as fast: the same
    requests, closer together."""
    assert base.replay is not None, "--by speed replays a trace"
    return replace(
        _widened(base, scale),
        sweep="replay",
        levels=(speed,),
        replay=replace(base.replay, speed=speed),
    )


def _widened(config: RunConfig, scale: int) -> RunConfig:
    """The trace window `scale` times as long (or as many records); the whole trace stays."""
    return replace(
        config,
        duration_s=None if config.duration_s is None else config.duration_s * scale,
        requests=None if config.requests is None else config.requests * scale,
    )


def _window(config: RunConfig, scale: int = 1) -> replay.Replay:
    assert config.replay is not None, "--by speed replays a trace"
    wide = _widened(config, scale)
    return replay.load(config.replay, wide.duration_s, wide.requests)


def window_requests(config: RunConfig, start: float) -> int:
    """--by speed: every probe replays the whole window, so its size is the probe's. A
    window with fewer measured requests (past the warm-up, at the start level) than the
    SLOs' percentiles need is refused before any load, saying what window would do."""
    assert config.replay is not None, "--by speed replays a trace"
    arrivals = _window(config).arrivals
    need = probe_requests(config.summary.slos, None)
    # the first probe's warm-up, in trace time: its records are not measured
    head = config.warmup_s * start
    warm = sum(a.offset_s * config.replay.speed < head for a in arrivals)
    if len(arrivals) - warm >= need:
        return len(arrivals)
    said = (
        f"--replay {config.replay.file}: the window holds {len(arrivals) - warm} measured "
        f"requests, and judging {config.summary.slos.describe()} needs at least {need} (to "
        "bound each percentile from both sides)"
    )
    if config.requests is not None:
        raise ValueError(f"{said}: --requests {need + warm} would give them")
    duration = replay.reach(config.replay, need + warm)
    if duration is None:
        raise ValueError(f"{said}, more than the trace holds from --replay-start on")
    raise ValueError(f"{said}: --duration {duration:g}s would give them")


def _virtual(config: RunConfig) -> bool:
    """Whether the search runs on the simulator's virtual clock (every target virtual:),
    each target's preset and --virtual-args checked before any probe."""
    found = [virtual.is_virtual(spec) for spec in config.targets]
    if not any(found):
        return False
    if not all(found):
        raise ValueError("--target: virtual: targets are searched alone, not beside servers")
    if config.embedded:
        raise ValueError("--embedded starts servers; a virtual: target needs none")
    for spec in config.targets:  # a virtual run of no level: what it refuses, said now
        drive_virtual(replace(config, targets=(spec,), levels=(), replay=None), None)
    return True


def _name(spec: str, config: RunConfig, file_targets: dict[str, dict] | None) -> str:
    """The target's name in the probes' summaries."""
    if virtual.is_virtual(spec):
        return f"{VIRTUAL}{virtual.preset(spec, config.virtual_args).name}"
    return resolve(spec, file_targets, overrides=config.overrides).name


def _search(config: RunConfig, capacity: CapacityConfig, requests: int) -> dict[str, Any]:
    file_targets = load_file(config.targets_file) if config.targets_file else None
    names = {s: _name(s, config, file_targets) for s in config.targets}
    axis = AXES[capacity.by]
    start, floor, ceiling = capacity.start, capacity.floor, capacity.ceiling
    searches = {s: Search(axis, start, floor=floor, ceiling=ceiling) for s in config.targets}
    prober = _Prober(config, capacity, axis, requests, names)
    stopped = "bracket"
    try:
        while stopped == "bracket":
            due = [
                (s, level)
                for s in config.targets
                if (level := searches[s].next_level()) is not None
            ]
            if not due:
                break
            for spec, level in due:  # one level per target per round: interleaved
                try:
                    prober.judge(spec, level, searches[spec])
                except _OutOfBudget:
                    stopped = "budget"
                    break
        for number in range(1, capacity.repeat + 1):
            _repeat(prober, searches, number)
    except KeyboardInterrupt:
        stopped = "interrupted"
        print("\nloadgen capacity: interrupted; writing what was found", file=sys.stderr)
    settings = {
        "settle_max_s": max(config.warmup_s, SETTLE_MAX_S),
        "window_e2es": WINDOW_E2ES,
        "max_window_s": MAX_WINDOW_S,
        "max_extensions": MAX_EXTENSIONS,
        "precision": PRECISION,
    }
    return capacity_report.result(
        config,
        axis,
        requests,
        capacity,
        settings,
        prober.elapsed,
        stopped,
        {names[spec]: (searches[spec], prober.probes.get(spec, [])) for spec in config.targets},
        prober.predicted,
    )


def _repeat(prober: _Prober, searches: dict[str, Search], number: int) -> None:
    """Re-run each target's bracket ends with new seeds, as long as their deciding probes."""
    for spec, search in searches.items():
        for level in (search.passing, search.failing):
            if level is None:
                continue
            deciding = [
                p
                for p in prober.probes[spec]
                if p["level"] == level and p["repeat"] is None and not p["extended"]
            ]
            again = prober.probe(spec, level, deciding[-1]["extension"], repeat=number)
            capacity_report.judged(again)


def _probe(
    level: float, number: int, target: dict[str, Any], summary: dict[str, Any], config: RunConfig
) -> dict[str, Any]:
    """One probe's entry in capacity.json (how it was run added by the caller)."""
    judged = verdict(target, config.summary.slos)
    outcome = "interrupted" if summary["interrupted"] else judged.outcome
    state = target.get("steady_state") or {}
    return {
        "number": number,
        "level": level,
        "outcome": outcome,
        "meets": outcome == "meets",
        "steady": judged.steady,
        "settled": state.get("settled"),
        "warmup_s": state.get("warmup_s"),
        "window_s": target["throughput"]["active_s"],
        "valid": judged.valid,
        "interrupted": summary["interrupted"],
        "failures": judged.failures,
        "unsure": judged.unsure,
        "ratios": judged.ratios,
        "intervals": judged.intervals,
        "requests": target["requests"]["ok"] + target["requests"]["failed"],
        "requests_per_s": target["throughput"]["requests_per_s"],
        "output_tokens_per_s": target["throughput"]["output_tokens_per_s"],
        **{metric: _figures(target["metrics"][metric]) for metric in PROBE_METRICS},
        "steady_state": target.get("steady_state"),
        **{block: target[block] for block in ("cost", "energy") if block in target},
    }


def _queueing(probe: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    """Closed loop: a level only queues if, against the probed level below it, throughput
    stayed flat while TTFT grew (steady.queueing, as a concurrency sweep judges it)."""
    judged = sorted((p for p in earlier if not p["interrupted"]), key=lambda p: p["level"])
    points = [(p["level"], p["requests_per_s"], p["ttft_s"]["p50"]) for p in judged]
    reason = steady.queueing(points).get(probe["level"])
    if reason:
        probe["steady"] = probe["meets"] = False
        probe["outcome"] = FAILS
        probe["failures"].append(f"saturated: {reason}")
        if probe["steady_state"]:
            probe["steady_state"]["steady"] = False
            probe["steady_state"]["reasons"].append(reason)


def _figures(block: dict[str, Any]) -> dict[str, Any]:
    return {k: block[k] for k in ("p50", "p90", "p99", "p999", "mean", "count", "ci95")}
