"""`python -m loadgen capacity`: per target, the most load at which every SLO holds, steady.

Each probe is one ordinary run (run.measure) of one target at one level, a
`dataclasses.replace` of the command's RunConfig, in its own run directory beside
capacity.json; the embedded stack, when asked for, is started once for all of them. Targets
take turns probe by probe (A, B, A, B …), so drift in shared hardware hits all alike. The
search (search.py) stops when every bracket is within 10%, when the next probe would not fit
in the budget, or at Ctrl-C; whatever was found is written either way (report.py).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from loadgen import embedded, replay, run, steady
from loadgen.capacity import report as capacity_report
from loadgen.capacity.search import Search, probe_requests, verdict
from loadgen.config import RunConfig
from loadgen.slo import LABELS
from loadgen.targets import load_file, resolve

PROBE_METRICS = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityConfig:
    by: str  # rate | concurrency | speed (a --replay's)
    start: float  # the first level probed
    budget_s: float
    probe_requests: int | None  # --requests: per probe and target (None: what the SLOs need)
    min_probe_s: float | None  # --duration: open-loop probes last at least this long


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
    if capacity.by == "speed":
        n = _window_requests(config)
    else:
        n = probe_requests(config.summary.slos, capacity.probe_requests)
    if not config.embedded:
        return _search(config, capacity, n)
    with embedded.stack(config.out / "embedded") as stack:
        return _search(run.on_stack(config, stack), capacity, n)


def _probe_config(
    base: RunConfig, spec: str, name: str, level: float, number: int, requests: int, by: str
) -> RunConfig:
    """Probe `number`: one target at one level, `requests` measured, in its own directory."""
    slug = "".join(c if c.isalnum() or c in "-." else "_" for c in name)
    if by == "speed":
        return replace(
            _speed_probe(base, level),
            out=base.out / f"probe-{number:02d}-{slug}-{level:g}x",
            command=f"{base.command}  # probe {number}: {name} at speed {level:g}",
            targets=(spec,),
            blocks=1,
        )
    return replace(
        base,
        out=base.out / f"probe-{number:02d}-{slug}-{level:g}",
        command=f"{base.command}  # probe {number}: {name} at {by} {level:g}",
        targets=(spec,),
        sweep=by,
        levels=(level,),
        requests=requests,
        duration_s=None,
        blocks=1,
    )


def _speed_probe(base: RunConfig, speed: float) -> RunConfig:
    """The trace's window replayed `speed` times as fast: the same requests, closer together."""
    assert base.replay is not None, "--by speed replays a trace"
    return replace(base, sweep="replay", levels=(speed,), replay=replace(base.replay, speed=speed))


def _window_requests(config: RunConfig) -> int:
    """--by speed: every probe replays the whole window, so its size is the probe's."""
    assert config.replay is not None, "--by speed replays a trace"
    window = replay.load(config.replay, config.duration_s, config.requests)
    return probe_requests(config.summary.slos, len(window.arrivals))


def _search(config: RunConfig, capacity: CapacityConfig, requests: int) -> dict[str, Any]:
    file_targets = load_file(config.targets_file) if config.targets_file else None
    names = {s: resolve(s, file_targets, overrides=config.overrides).name for s in config.targets}
    searches = {spec: Search(capacity.by, capacity.start) for spec in config.targets}
    probes: dict[str, list[dict[str, Any]]] = {spec: [] for spec in config.targets}
    wall: dict[str, float] = {}  # spec -> how long its last probe took
    began = time.monotonic()
    stopped, number = "bracket", 0
    try:
        while stopped == "bracket":
            due = [(s, searches[s].next_level()) for s in config.targets]
            due = [(spec, level) for spec, level in due if level is not None]
            if not due:
                break
            for spec, level in due:  # one probe per target per round: interleaved
                if time.monotonic() - began + wall.get(spec, 0.0) > capacity.budget_s:
                    stopped = "budget"
                    break
                number += 1
                n = requests
                if capacity.by == "rate" and capacity.min_probe_s:
                    n = max(requests, math.ceil(capacity.min_probe_s * level))
                _announce(number, names[spec], capacity.by, level, searches[spec], n)
                probe_config = _probe_config(
                    config, spec, names[spec], level, number, n, capacity.by
                )
                probe_started = time.monotonic()
                summary = run.measure(probe_config)
                wall[spec] = time.monotonic() - probe_started
                probe = _probe(level, number, summary["targets"][names[spec]], summary, config)
                probe["run_dir"] = probe_config.out.name
                probes[spec].append(probe)
                if capacity.by == "concurrency":
                    _queueing(probe, probes[spec])
                if summary["interrupted"]:
                    raise KeyboardInterrupt
                searches[spec].record(level, probe["meets"])
                _report(probe, searches[spec])
    except KeyboardInterrupt:
        stopped = "interrupted"
        print("\nloadgen capacity: interrupted; writing what was found", file=sys.stderr)
    return capacity_report.result(
        config,
        capacity.by,
        requests,
        capacity.budget_s,
        time.monotonic() - began,
        stopped,
        {names[spec]: (searches[spec], probes[spec]) for spec in config.targets},
    )


def _probe(
    level: float, number: int, target: dict[str, Any], summary: dict[str, Any], config: RunConfig
) -> dict[str, Any]:
    """One probe's entry in capacity.json (its run_dir added by the caller)."""
    judged = verdict(target, config.summary.slos)
    return {
        "number": number,
        "level": level,
        "meets": judged.meets and not summary["interrupted"],
        "steady": judged.steady,
        "valid": judged.valid,
        "interrupted": summary["interrupted"],
        "failures": judged.failures,
        "ratios": judged.ratios,
        "requests": target["requests"]["ok"] + target["requests"]["failed"],
        "requests_per_s": target["throughput"]["requests_per_s"],
        "output_tokens_per_s": target["throughput"]["output_tokens_per_s"],
        **{metric: _figures(target["metrics"][metric]) for metric in PROBE_METRICS},
        "steady_state": target.get("steady_state"),
    }


def _queueing(probe: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    """Closed loop: a level only queues if, against the probed level below it, throughput
    stayed flat while TTFT grew (steady.queueing, as a concurrency sweep judges it)."""
    judged = sorted((p for p in earlier if not p["interrupted"]), key=lambda p: p["level"])
    points = [(p["level"], p["requests_per_s"], p["ttft_s"]["p50"]) for p in judged]
    reason = steady.queueing(points).get(probe["level"])
    if reason:
        probe["steady"] = probe["meets"] = False
        probe["failures"].append(f"saturated: {reason}")
        if probe["steady_state"]:
            probe["steady_state"]["steady"] = False
            probe["steady_state"]["reasons"].append(reason)


def _figures(block: dict[str, Any]) -> dict[str, Any]:
    return {k: block[k] for k in ("p50", "p90", "p99", "p999", "mean", "count", "ci95")}


def _announce(number: int, name: str, by: str, level: float, search: Search, requests: int) -> None:
    unit = {"rate": "req/s", "speed": "x"}.get(by, "streams")
    low = "—" if search.passing is None else f"{search.passing:g}"
    high = "—" if search.failing is None else f"{search.failing:g}"
    print(
        f"capacity: probe {number}: {name} at {level:g} {unit} ({requests} requests; "
        f"bracket [{low}, {high}])",
        file=sys.stderr,
        flush=True,
    )


def _report(probe: dict[str, Any], search: Search) -> None:
    low = "—" if search.passing is None else f"{search.passing:g}"
    high = "—" if search.failing is None else f"{search.failing:g}"
    figures = ", ".join(f"{LABELS[m]} {r:.0%} of its limit" for m, r in probe["ratios"].items())
    outcome = "meets" if probe["meets"] else "fails: " + "; ".join(probe["failures"])
    print(
        f"capacity:   {outcome} ({figures}); bracket now [{low}, {high}]",
        file=sys.stderr,
        flush=True,
    )
