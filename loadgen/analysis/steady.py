"""Steady state or saturated: did the server keep up with one level of load? Pure, no I/O.

A server given more than it can serve queues the rest, and the queue grows for as long as
the load lasts: its TTFT percentiles then describe how long the run was, not the server.
From the records of one target at one level (a sweep point, or the single level):

- open loop: requests that arrived in the measured window (intended send in it) against
  requests that completed in it, per second, beyond the shortfall a server that keeps up
  has too (what is in flight at the close), and how many were still waiting or in flight
  when it closed against when it opened;
- open loop, the trend of TTFT over the window: the least-squares slope over intended send
  time (s/s, one intercept per block, since each block starts on a drained server) with its
  95% interval, and the median of the window's first third against its last (reported in
  closed loop too, where the streams bound the queue and only `queueing` judges);
- when server metrics were sampled: vLLM's waiting queue at both ends, and preemptions;
- closed loop, across levels (`queueing`): more streams than the server runs at once show as
  throughput that stays flat while TTFT grows.

A replay is judged by what the server does, not by its TTFT trend alone nor by what is in
flight when the window closes alone: a trace's TTFT follows its own prompt lengths, and its
arrivals need not be stationary (they may bunch at the window's end). So a replay's level
is saturated when its completions, counted over the whole window plus the drain, fell
behind its arrivals (requests the drain ended: `unfinished`), when the server's waiting
queue grew across the window, when it preempted, or when both its completions in the window
fell behind its arrivals and its TTFT climbed (each as an open loop's rule says): a queue
that grows shows as both, a trace's own shape as one at most.

A saturated open-loop level's throughput is what completed in its window, not what arrived
(`completion_per_s`, `completion_output_tokens_per_s`): every request of the window may
still finish within the drain, at the rate the server could serve, not the load's.

Neighbouring requests share a queue, so their TTFTs are correlated and the slope's interval
is narrower than an independent sample's would be; a trend therefore also has to be large
(the last third's median at least GROWTH times the first's) before it calls a level
saturated. `valid` (did the client keep up) is a separate question, judged in summary.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.analysis import settle
from loadgen.analysis.records import UNFINISHED, Phase, Record

SHORTFALL = 0.10  # completions this far below arrivals: the server did not keep up
BACKLOG = 5  # requests: a shortfall smaller than this (beyond the in-flight edge) is noise
GROWTH = 1.5  # the last third's median TTFT this many times the first third's
GROWTH_FLOOR_S = 0.05  # ... and at least this much higher: a few ms of jitter is no trend
MIN_TREND = 10  # successful requests below which no trend is judged
FLAT = 0.25  # closed loop: throughput rose by less than this share of the added concurrency
QUEUED = 1.5  # ... while TTFT P50 grew by this factor


def t95(dof: int) -> float:
    """Two-sided 95% quantile of Student's t (Cornish–Fisher; within 1% from 3 dof up)."""
    z = 1.959964
    if dof <= 0:
        return math.inf
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
    )
    return z + sum(term / float(dof) ** k for k, term in enumerate(terms, start=1))


def _windows(phases: Sequence[Phase]) -> dict[int, tuple[float, float]]:
    """Each block's measured window (shards of one block together)."""
    windows: dict[int, tuple[float, float]] = {}
    for p in phases:
        start, end = windows.get(p.block, (p.start_at, p.end_at))
        windows[p.block] = (min(start, p.start_at), max(end, p.end_at))
    return windows


def _waiting_at(records: Sequence[Record], at: float) -> int:
    """Requests due by `at` and not finished then (waiting to be sent, queued or running)."""
    return sum(r.intended_at <= at < r.end_at for r in records)


def _trend(records: Sequence[Record], windows: Mapping[int, tuple[float, float]]) -> dict[str, Any]:
    """TTFT slope over intended send time (one intercept per block), its interval, thirds."""
    by_block: dict[int, list[tuple[float, float, float]]] = {}
    for r in records:
        if r.ok and not r.excluded and r.ttft_s is not None and r.block in windows:
            start, end = windows[r.block]
            since = r.intended_at - start
            by_block.setdefault(r.block, []).append(
                (since, since / max(end - start, 1e-9), r.ttft_s)
            )
    dx, dy, first, last = [], [], [], []
    for points in by_block.values():
        xs, where, ys = (np.asarray(v, dtype=np.float64) for v in zip(*points, strict=True))
        dx.append(xs - xs.mean())
        dy.append(ys - ys.mean())
        first.append(ys[where < 1 / 3])
        last.append(ys[where >= 2 / 3])
    n = sum(len(d) for d in dx)
    firsts, lasts = np.concatenate(first or [np.empty(0)]), np.concatenate(last or [np.empty(0)])
    out: dict[str, Any] = {
        "ttft_slope": None,
        "ttft_slope_ci95": None,
        "ttft_first_third_s": float(np.median(firsts)) if len(firsts) else None,
        "ttft_last_third_s": float(np.median(lasts)) if len(lasts) else None,
    }
    x, y = np.concatenate(dx or [np.empty(0)]), np.concatenate(dy or [np.empty(0)])
    sxx = float(x @ x) if n else 0.0
    if n < MIN_TREND or sxx <= 0:
        return out
    slope = float(x @ y) / sxx
    dof = n - len(dx) - 1
    residual = y - slope * x
    half = t95(dof) * math.sqrt(float(residual @ residual) / dof / sxx) if dof > 0 else math.inf
    out["ttft_slope"] = slope
    out["ttft_slope_ci95"] = [slope - half, slope + half]
    return out


def judge(
    records: Sequence[Record],
    phases: Sequence[Phase],
    active_s: float,
    open_loop: bool,
    server: Mapping[str, Any] | None = None,
    replay: bool = False,
) -> dict[str, Any]:
    """summary.json's steady_state of one target at one level.

    records: all of the target's at this level (warmup and cooldown ones too: they hold the
    server's queue); phases: its blocks at this level; active_s: the union of their windows.
    server: the gauges of summary.json's server block (server_metrics.server_block), when sampled
    (`waiting` {start, end}, `preemptions`). replay: a trace's arrivals (the module
    docstring says how they are judged).
    """
    windows = _windows(phases)
    measured = [r for r in records if not r.excluded]
    done = [r for r in records if r.ok and _within(r.end_at, windows.get(r.block))]
    completed = len(done)
    per_s = (lambda n: n / active_s) if active_s > 0 else (lambda n: None)
    arrival, completion = per_s(len(measured)), per_s(completed)
    blocks = {b: [r for r in records if r.block == b] for b in windows}
    in_flight_start = sum(_waiting_at(blocks[b], start) for b, (start, _) in windows.items())
    in_flight_end = sum(_waiting_at(blocks[b], end) for b, (_, end) in windows.items())
    trend = _trend(records, windows)
    unfinished = sum(r.error == UNFINISHED for r in measured)
    reasons = []
    if _drowned(len(measured), unfinished):
        reasons.append(
            f"{unfinished} of the window's {len(measured)} requests were still unfinished "
            "when the drain after it ended"
        )
    behind = open_loop and _fell_behind(measured, completed, windows, replay)
    climbed = open_loop and _climbed(trend)
    # closed loop: queueing() judges across levels; a replay: only both together
    if behind and (climbed or not replay):
        reasons.append(
            f"requests arrived at {arrival:.1f}/s and completed at {completion:.1f}/s; "
            f"{in_flight_end} were still waiting or in flight when the measured window closed "
            f"({in_flight_start} when it opened)"
        )
    if climbed and (behind or not replay):
        slope, first, last = (
            trend["ttft_slope"],
            trend["ttft_first_third_s"],
            trend["ttft_last_third_s"],
        )
        reasons.append(
            f"TTFT grew {slope:.{2 if slope >= 0.1 else 3}f} s every second (median "
            f"{first:.2f} s in the window's first third, {last:.2f} s in its last)"
        )
    reasons += _server_reasons(server or {}, open_loop)
    reasons += _runaway(phases)
    settles = [p.settled for p in phases if p.settled is not None]
    verdict: dict[str, Any] = {
        "steady": not reasons,
        "reasons": reasons,
        "loop": "open" if open_loop else "closed",
        "replay": replay,  # judged by the server alone: no TTFT trend, no in-flight tail
        # a settling warm-up (settle.py): did the in-flight count stop growing before the window
        "settled": all(settles) if settles else None,
        "warmup_s": max((p.warmup_s for p in phases if p.warmup_s is not None), default=None),
        "arrival_per_s": arrival,
        "completion_per_s": completion,
        "completion_output_tokens_per_s": per_s(sum(r.output_tokens or 0 for r in done)),
        **trend,
        "in_flight_start": in_flight_start,
        "in_flight_end": in_flight_end,
        "unfinished": unfinished,
        "drain_s": max((p.drain_s for p in phases if p.drain_s is not None), default=None),
    }
    if server:
        verdict["server"] = {k: server[k] for k in ("waiting", "preemptions") if k in server}
    return verdict


def _within(at: float, window: tuple[float, float] | None) -> bool:
    return window is not None and window[0] <= at <= window[1]


def _climbed(trend: Mapping[str, Any]) -> bool:
    """TTFT rose through the window beyond its interval and beyond GROWTH (_trend's figures)."""
    slope, ci = trend["ttft_slope"], trend["ttft_slope_ci95"]
    first, last = trend["ttft_first_third_s"], trend["ttft_last_third_s"]
    return (
        slope is not None
        and ci[0] > 0
        and first is not None
        and last is not None
        and last >= GROWTH * first
        and last - first >= GROWTH_FLOOR_S
    )


def _fell_behind(
    measured: Sequence[Record],
    completed: int,
    windows: Mapping[int, tuple[float, float]],
    replay: bool = False,
) -> bool:
    """Completions fell short of arrivals by more than a server that keeps up would.

    For a server that keeps up, arrivals minus completions in the window is the change of
    what is in flight between its opening and its close: two counts that each scatter
    around L = arrival rate × E2E (Little's law), so their difference scatters by about
    sqrt(2 L). The shortfall counts only beyond three of those, with the E2E of the window's
    first third; a queue that grows adds (arrival − completion rate) × window on top.
    A replay's arrivals need not be stationary, so its L is what arrived within that E2E
    of each close, and its shortfall what was in flight at the close beyond it, at two
    thirds of the window as well as at its close: a burst at the window's end leaves a
    backlog at the close only, a server falling behind leaves one throughout.
    """
    shortfall = len(measured) - completed
    if shortfall < BACKLOG or completed >= (1 - SHORTFALL) * len(measured):
        return False
    young = []
    for r in measured:
        start, end = windows.get(r.block, (r.intended_at, r.intended_at))
        if r.ok and r.e2e_s is not None and r.intended_at < start + (end - start) / 3:
            young.append(r.e2e_s)
    e2e = float(np.median(young)) if young else 0.0
    if replay:
        return all(_backlogged(measured, windows, e2e, share) for share in (2 / 3, 1.0))
    span = sum(end - start for start, end in windows.values())
    in_flight = len(measured) / span * e2e if span > 0 else 0.0
    return shortfall > BACKLOG + 3 * math.sqrt(2 * in_flight)


def _backlogged(
    measured: Sequence[Record],
    windows: Mapping[int, tuple[float, float]],
    e2e: float,
    share: float,
) -> bool:
    """At `share` of each window, more requests in flight than arrived within an E2E of
    then, beyond the scatter of that count (Little's law, as _fell_behind)."""
    left = recent = 0
    for block, (start, end) in windows.items():
        at = start + share * (end - start)
        mine = [r for r in measured if r.block == block]
        left += _waiting_at(mine, at)
        recent += sum(at - e2e < r.intended_at <= at for r in mine)
    return left - recent > BACKLOG + 3 * math.sqrt(2 * recent)


def _drowned(measured: int, unfinished: int) -> bool:
    """So many of the window's requests outlasted the drain that the server fell behind: its
    completions, counted over the whole window and the drain, did not catch up with arrivals."""
    return unfinished >= BACKLOG and unfinished > SHORTFALL * measured


def _runaway(phases: Sequence[Phase]) -> list[str]:
    """A settling warm-up whose in-flight count ran away (settle.ran_away): saturated."""
    for p in phases:
        if p.settled is False and p.warmup_in_flight is not None:
            before, after = p.warmup_in_flight
            if settle.runaway(before, after):
                return [
                    f"requests in flight grew from {before:.0f} to {after:.0f} through the "
                    f"warm-up ({p.warmup_s:.0f} s) and never settled"
                ]
    return []


def label(state: Mapping[str, Any] | None) -> str | None:
    """The words a saturated level's percentiles are shown with; None when steady."""
    if not state or state["steady"]:
        return None
    if state.get("loop") == "open":
        said = "the server fell behind the load"
        consequence = "these percentiles grow with the run's length"
    else:
        said, consequence = "the server", "these percentiles include waiting behind its batch limit"
    return f"saturated: {said}: {'; '.join(state['reasons'])} — {consequence}"


def unfinished(state: Mapping[str, Any] | None) -> str | None:
    """The sentence for requests the drain ended; None when there were none."""
    if not state or not state.get("unfinished"):
        return None
    n, drain = state["unfinished"], state.get("drain_s")
    after = f"{drain:g} s after the window closed" if drain is not None else "at the drain's end"
    return (
        f"{n} measured request{'s' if n != 1 else ''} still running {after} (the drain) "
        "ended there: counted as unfinished, left out of every percentile"
    )


def _server_reasons(server: Mapping[str, Any], open_loop: bool) -> list[str]:
    reasons = []
    waiting = server.get("waiting") or {}
    start, end = waiting.get("start"), waiting.get("end")
    if start is not None and end is not None:
        if open_loop and end - start >= max(BACKLOG, start):
            reasons.append(f"the server's waiting queue grew from {start:g} to {end:g} requests")
        # closed loop: a few waiting at an instant is a prefill that did not fit this step's
        # token budget (streams of equal length finish, and come back, together); several at
        # both ends is streams beyond what the server runs at once
        if not open_loop and min(start, end) >= BACKLOG:
            reasons.append(
                f"requests waited in the server's queue ({start:g} when the window opened, "
                f"{end:g} when it closed): more streams than it runs at once"
            )
    preemptions = server.get("preemptions")
    if preemptions:
        reasons.append(f"the server preempted {preemptions:g} requests (its KV cache was full)")
    return reasons


def queueing(points: Sequence[tuple[float, float | None, float | None]]) -> dict[float, str]:
    """Closed-loop levels beyond what the server runs at once, each with its reason.

    points: (concurrency, requests/s, TTFT P50 s) in rising concurrency. A level whose
    throughput rose by less than FLAT of its added concurrency over the level below, while
    its TTFT P50 grew QUEUED-fold, only added waiting: the extra streams queue.
    """
    found = {}
    for (c1, x1, t1), (c2, x2, t2) in itertools.pairwise(points):
        if not x1 or not t1 or x2 is None or t2 is None or c2 <= c1:
            continue
        gain = x2 / x1 - 1
        if gain < FLAT * (c2 / c1 - 1) and t2 >= QUEUED * t1:
            found[c2] = (
                f"concurrency {c2:g} is beyond what the server runs at once: throughput "
                f"{x1:.2f} req/s at {c1:g}, {x2:.2f} req/s at {c2:g} ({gain * 100:+.0f}%), "
                f"while TTFT P50 rose from {t1:.2f} s to {t2:.2f} s (the extra streams queue)"
            )
    return found


def knee(points: Sequence[tuple[float, bool]]) -> dict[str, float | None] | None:
    """Where an open-loop sweep crosses from keeping up to falling behind: `steady_up_to`,
    the highest steady level below `saturated_at`, the lowest saturated one. points: (level,
    steady) in any order; None when no level saturated."""
    ordered = sorted(points)
    for i, (level, steady) in enumerate(ordered):
        if not steady:
            below = [lv for lv, ok in ordered[:i] if ok]
            return {"steady_up_to": below[-1] if below else None, "saturated_at": level}
    return None


def knee_sentence(name: str, found: Mapping[str, float | None], unit: str, predicted: bool) -> str:
    """The knee in words: "virtual:x saturates between 2.5 and 3 req/s (predicted)"."""
    low, high = found["steady_up_to"], found["saturated_at"]
    said = f"between {low:g} and {high:g} {unit}" if low is not None else f"at {high:g} {unit}"
    return f"{name} saturates {said}" + (" (predicted)" if predicted else "")
