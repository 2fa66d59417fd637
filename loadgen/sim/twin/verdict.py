"""A fit from start to verdict: which terms the capture can identify, the search (fit.py),
the front end kept or not, and how well the fitted twin predicts what it was not fitted
on. Pure, no I/O.

The last `holdout` share of each source's requests (by arrival) is never fitted to: the
fitted twin replays the whole capture and its P50 and P90 of TTFT and TPOT over those
requests are set against the measured ones, over all of them and per source. That is the
error a user should expect of a what-if, and it decides the front end: its terms are kept
only when they lower it. When the capture has the server's own timings, the engine is
fitted to those (fit_targets.engine_timed) and the front end, with the engine's terms held, to the
client's TTFT alone: the time between the client and the engine (API server, network,
proxy) is what it stands for. The server's own TTFT and TPOT are then judged on the
held-out requests too (`held_out_server`). Without them, the front end is a delay each
request has on its own (frontend_latency), fitted with the engine's terms: the time
outside the engine shows only in the client's TTFT, where work requests queue for looks
the same at one load, and a serial front end would claim a limit the capture shows no
sign of.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import deployment, fit
from loadgen.sim.twin.capture import Capture, Captured
from loadgen.sim.twin.figures import client_figures, percentile, server_figures
from loadgen.sim.twin.fit import ADMISSION, FRONTEND, LATENCY, OUTPUT, TERMS, Fitted, Search
from loadgen.sim.twin.fit_targets import SLICES, Targets, engine_timed
from loadgen.sim.twin.front_start import delay_start, gap_start
from loadgen.sim.twin.front_words import FRONTEND_GAIN, TIMED, UNTIMED, not_kept

QUIET = 0.002  # a term whose STEP change moves the fitted figures less (rms, log) is unseen
TIED = 0.95  # |correlation| of two terms' bootstrap estimates above which they are one
CEILING_NEAR = 0.01  # a term within this share of its ceiling is at it
MIN_HELD_OUT = 10  # held-out requests: with fewer, a P90 is only their largest value


@dataclass(slots=True)
class Report:
    values: dict[str, float]  # every term's value in the fitted preset
    base: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    not_identified: dict[str, str] = field(default_factory=dict)  # term: why, in words
    # terms pinned at their GPU's ceiling: value needed, ceiling, and the warning in words
    at_ceiling: dict[str, dict[str, Any]] = field(default_factory=dict)
    held_out: dict[str, dict[str, float]] = field(default_factory=dict)
    held_out_server: dict[str, dict[str, float]] = field(default_factory=dict)
    # per SOURCE, in the order given: its own held-out figures and their mean error
    by_source: list[dict[str, Any]] = field(default_factory=list)
    fitted_load: dict[str, dict[str, float]] = field(default_factory=dict)  # as held_out
    slices: list[dict[str, Any]] = field(default_factory=list)
    frontend: dict[str, Any] = field(default_factory=dict)
    replays: int = 0

    def held_out_error(self) -> float:
        """The mean absolute error of the held-out P50 and P90 of TTFT and TPOT."""
        return mean_error(self.held_out)


def mean_error(figures: dict[str, dict[str, float]]) -> float:
    errors = [abs(v["error"]) for v in figures.values()]
    return sum(errors) / len(errors) if errors else math.inf


def held_out(capture: Capture, holdout: float) -> set[int]:
    """The requests kept out of the fit: the last `holdout` share (by arrival) of each
    source's, so that each source's error is its own."""
    held: set[int] = set()
    if holdout <= 0:
        return held
    for source in range(len(capture.sources)):
        mine = [i for i, r in enumerate(capture.requests) if r.source == source]
        held.update(mine[len(mine) - max(1, round(len(mine) * holdout)) :] if mine else [])
    return held


def calibrate(
    base: Preset,
    capture: Capture,
    holdout: float = 0.3,
    replicas: int = 1,
    on_replay: Callable[[], None] | None = None,
) -> Report:
    """The fitted terms of `base` for `capture`, with their intervals and the held-out error;
    `on_replay` is told after each replay of the capture (the first is the base preset's)."""
    held = held_out(capture, holdout)
    targets = Targets.of(capture, [i for i in range(len(capture.requests)) if i not in held])
    search = Search(base, capture, targets, replicas, on_replay)
    start = {t.name: t.get(base) for t in (*TERMS, *FRONTEND)}
    first = deployment.run(base, search.requests, replicas)
    if on_replay is not None:
        on_replay()
    reasons = physics(base, first.steps)
    bounded = fit.terms(base)
    free = [t for t in bounded if t.name not in reasons]
    fitted = fit.fit(search, start, free)
    pinned = at_ceiling(fitted, free)
    reasons |= unidentified(fitted, pinned)
    hull = dict(fitted.intervals)
    while any(name in reasons for name in fitted.free):
        free = [t for t in free if t.name not in reasons]
        kept = start | {k: v for k, v in fitted.values.items() if k in {t.name for t in free}}
        fitted = fit.fit(search, kept, free)
        pinned = at_ceiling(fitted, free)
        reasons |= unidentified(fitted, pinned)
        hull = _hull(hull, fitted.intervals)
    report = _report(start, fitted, reasons, search.replays)
    report.at_ceiling = pinned
    # a term's interval spans every round it was free in: with a partner it trades off with
    # fixed at the base value, its own interval alone would claim a certainty it lacks
    report.intervals = {k: hull[k] for k in report.intervals}
    _judge(report, search, capture, held)
    without = report.held_out_error()
    fitted_to = [i for i in range(len(capture.requests)) if i not in held]
    timed = any(engine_timed(capture.requests[i]) for i in fitted_to)
    if timed:  # the engine's held
        with_frontend, trial = _after_engine(base, capture, fitted_to, replicas, report, search)
    else:
        delay = delay_start([capture.requests[i] for i in fitted_to])
        with_frontend = fit.fit(search, fitted.values | delay, [*free, LATENCY])
        trial = _report(start, with_frontend, reasons | UNTIMED, search.replays)
        _judge(trial, search, capture, held)
    gain = without - trial.held_out_error()
    front = [t.name for t in FRONTEND if t.name in with_frontend.free]
    unclear = {name: why for name in front if (why := why_not(with_frontend, name))}
    frontend_words = {
        "held_out_error_without": without,
        "held_out_error_with": trial.held_out_error(),
    }
    blocking = [*unclear, *(n for n in unidentified(with_frontend, pinned) if n not in unclear)]
    # without the server's timings the delay shows only in the client's TTFT, beside the
    # engine's terms: one that lowers the held-out error is kept however loosely the capture
    # pins it down, as the base's nothing is what the capture rules out
    if front and gain >= FRONTEND_GAIN and (not blocking or not timed):
        trial.frontend = frontend_words | {"kept": True, "loose": blocking}
        trial.at_ceiling = at_ceiling(with_frontend, [*free, *FRONTEND])
        trial.replays = search.replays
        return trial
    why = not_kept(trial.held_out_error(), without, blocking)
    fixed = TIMED if timed else UNTIMED  # the front end this kind of capture does not fit
    useless = gain < FRONTEND_GAIN  # then that is the reason, however clear its terms
    for term in FRONTEND:
        report.not_identified[term.name] = (
            fixed.get(term.name)
            or (why if useless else unclear.get(term.name))
            or trial.not_identified.get(term.name, why)
        )
    report.frontend = frontend_words | {"kept": False, "loose": []}
    report.replays = search.replays
    return report


def _after_engine(
    base: Preset,
    capture: Capture,
    fitted_to: list[int],
    replicas: int,
    engine: Report,
    search: Search,
) -> tuple[Fitted, Report]:
    """The front end fitted after the engine: its work on the way in, then, from the gap
    again, with the output work too, which is kept only where it lowers the held-out error
    by FRONTEND_GAIN (on two shared cores the gap rarely follows the streams running: it
    is not let to explain the box's stalls)."""
    held = set(range(len(capture.requests))) - set(fitted_to)

    def judged(fitted: Fitted, reasons: dict[str, str], replays: int) -> Report:
        search.replays += replays
        trial = _report(engine.values, fitted, reasons, search.replays)
        trial.base, trial.intervals = dict(engine.base), engine.intervals | trial.intervals
        _judge(trial, search, capture, held)
        return trial

    gap = gap_start([capture.requests[i] for i in fitted_to])
    front = (base, capture, fitted_to, replicas, engine)
    admission, tied, replays = _front_end(*front, gap, [*ADMISSION])
    trial = judged(admission, tied, replays)
    more = [t for t in ADMISSION if t.name in admission.free] + [OUTPUT]
    busy, tied, replays = _front_end(*front, gap, more)
    busier = judged(busy, tied, replays)
    if busier.held_out_error() <= trial.held_out_error() - FRONTEND_GAIN:
        return busy, busier
    return admission, trial


def _front_end(
    base: Preset,
    capture: Capture,
    fitted_to: list[int],
    replicas: int,
    engine: Report,
    start: dict[str, float],
    free: list[fit.Term],
) -> tuple[Fitted, dict[str, str], int]:
    """The `free` front-end terms fitted to the client's TTFT alone, the engine's terms held
    at `engine`'s values, from `start` (the median gap between the client's TTFT and the
    server's, front_start.py). A term the capture cannot identify (of a cost per request and
    one per prompt token, which trade off over prompts of similar length, one) is fixed at
    0 and the others refitted from the start again (where its partner left it, a term
    would look unseen): the fit, its reasons, its replays."""
    client = Targets.of(capture, fitted_to, only=frozenset({"ttft"}))
    alone = Search(base, capture, client, replicas)
    first = engine.values | {t.name: start[t.name] for t in free}
    reasons = engine.not_identified | TIMED
    fitted = fit.fit(alone, first, free)
    reasons |= unidentified(fitted)
    while any(name in reasons for name in fitted.free):
        free = [t for t in free if t.name not in reasons]
        fitted = fit.fit(alone, engine.values | {t.name: first[t.name] for t in free}, free)
        reasons |= unidentified(fitted)
    return fitted, reasons, alone.replays


def _hull(
    a: dict[str, tuple[float, float]], b: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """Per term, the smallest interval holding both."""
    out = dict(a)
    for name, (lo, hi) in b.items():
        old = out.get(name, (lo, hi))
        out[name] = (min(lo, old[0]), max(hi, old[1]))
    return out


def physics(base: Preset, steps: deployment.Steps) -> dict[str, str]:
    """Terms the capture cannot reach whatever their value, from what the base replay did."""
    reasons: dict[str, str] = {}
    perf = base.perf
    if steps.compute_bound == 0:
        reasons["mfu"] = (
            f"no compute-bound step (the largest had {steps.max_tokens:,} tokens; this model's "
            f"steps turn compute-bound above about {ridge(base):,}): MFU kept from the base preset"
        )
    if perf.hardware.tensor_parallel == 1:
        for name in ("allreduce_latency", "interconnect_bandwidth"):
            reasons[name] = "one GPU (tensor parallel 1): no all-reduce to time"
    else:
        reasons["allreduce_latency"] = (
            "a fixed cost per step, as host_overhead is: no capture tells the two apart "
            "(host_overhead carries both; the all-reduce latency is kept from the base preset)"
        )
        reasons["interconnect_bandwidth"] = (
            "a cost per token: in decode steps (a token per sequence) it is sequence_overhead's, "
            "in prefill steps MFU's (sequence_overhead and MFU carry it; the link is kept from "
            "the base preset)"
        )
    if steps.max_sequences == steps.min_sequences:
        reasons["sequence_overhead"] = (
            f"every step had {steps.max_sequences} sequences: a cost per sequence cannot be "
            "told from the cost per step"
        )
    return reasons


def ridge(preset: Preset) -> int:
    """Tokens per step above which a step's compute outlasts its weight reads."""
    perf = preset.perf
    memory = perf.step_time(1, 0).memory
    per_token = perf.step_time(1, 0).compute
    return math.ceil(memory / per_token)


def at_ceiling(fitted: Fitted, free: list[fit.Term]) -> dict[str, dict[str, Any]]:
    """Efficiency terms the search left at their GPU's ceiling while the capture asks for
    more: each with the value it needed (the unbounded linearised optimum), the ceiling,
    and the warning in words."""
    out: dict[str, dict[str, Any]] = {}
    for term in free:
        if term.name not in fit.CEILINGS:
            continue
        value, needed = fitted.values[term.name], fitted.unbounded.get(term.name, 0.0)
        if value < term.high * (1 - CEILING_NEAR) or needed <= term.high:
            continue
        ceiling = round(term.high / 0.999, 3)
        what = "datasheet bandwidth" if term.name == "mbu" else "datasheet FLOP/s"
        out[term.name] = {
            "needed": needed,
            "ceiling": ceiling,
            "warning": (
                f"{term.name} ran into its ceiling: the capture is faster than this GPU's "
                f"{what} allows at {term.name.upper()} {ceiling:g} (it needed about "
                f"{needed:.2f}): check --gpu, the dtype, or the ceiling"
            ),
        }
    return out


def unidentified(fitted: Fitted, pinned: dict[str, Any] | None = None) -> dict[str, str]:
    """Free terms the search could not pin down, each with why: every term the figures do
    not move with, else of those whose interval is too wide only the widest for its range
    (two terms that trade off are both wide until one of them is fixed, and a term the
    search drove to nothing may be what made its partner wide: fixing it, the partner is
    judged again in the next round). A term pinned at its ceiling is not among them: the
    capture says where it would be (at_ceiling)."""
    pinned = pinned or {}
    reasons = {
        n: why
        for n in fitted.free
        if n not in pinned and (why := why_not(fitted, n)) and _quiet(fitted, n)
    }
    open_ = [n for n in fitted.free if n not in reasons and n not in pinned]
    wide = [n for n in open_ if why_not(fitted, n)]
    # two terms whose estimates move together are one term to this capture, however
    # narrow each interval looks from where the search stopped
    tied = [n for n in open_ if abs(fitted.partner[n][1]) > TIED]
    if wide and not reasons:
        # widest for its range: a term confined to ×15 (MBU) that spans all of it is
        # less known than one that spans ×35 of a ×10,000 range (the host overhead)
        name = max(wide, key=lambda n: fitted.spread[n] / _log_range(n))
        reasons[name] = why_not(fitted, name) or ""
    elif tied and not reasons:  # of a tied pair, the one the figures see less
        name = min(tied, key=lambda n: fitted.sensitivity[n])
        reasons[name] = _tied(fitted, name)
    return reasons


def _tied(fitted: Fitted, name: str) -> str:
    other, r = fitted.partner[name]
    return (
        f"trades off with {other} (their estimates over the bootstrap correlate {r:+.2f}): "
        "the capture cannot tell them apart, kept from the base preset"
    )


def _log_range(name: str) -> float:
    term = next(t for t in (*TERMS, *FRONTEND) if t.name == name)
    return math.log(term.high / term.low)


def why_not(fitted: Fitted, name: str) -> str | None:
    """Why a free term is not identified, or None when it is."""
    if _quiet(fitted, name):
        return (
            f"a {math.expm1(fit.STEP):.0%} change of it moves the fitted figures by under "
            f"{fitted.sensitivity[name] * fit.STEP:.2%}: kept from the base preset"
        )
    if fitted.spread[name] > fit.WIDE:
        return (
            f"its 95% interval spans ×{math.exp(fitted.spread[name]):.1f}: the capture "
            "cannot tell it from the other terms, kept from the base preset"
        )
    return None


def _quiet(fitted: Fitted, name: str) -> bool:
    return fitted.sensitivity[name] * fit.STEP < QUIET


def _report(
    start: dict[str, float], fitted: Fitted, reasons: dict[str, str], replays: int
) -> Report:
    values = dict(start) | fitted.values  # the fixed terms as the last search held them
    return Report(
        values=values,
        base=dict(start),
        intervals={k: v for k, v in fitted.intervals.items() if k not in reasons},
        not_identified=dict(reasons),
        replays=replays,
    )


def _judge(report: Report, search: Search, capture: Capture, held: set[int]) -> None:
    """The held-out error (in all, and per source) and the error per time slice, of the
    report's values."""
    timings = search.timings(report.values)
    pairs = list(zip(capture.requests, timings, strict=True))
    kept = [(r, t) for i, (r, t) in enumerate(pairs) if i in held and r.measured]
    report.held_out = _percentile_errors(kept)
    report.held_out_server = _percentile_errors(kept, server_figures)
    report.fitted_load = _percentile_errors(
        [(r, t) for i, (r, t) in enumerate(pairs) if i not in held and r.measured]
    )
    report.by_source = []
    for source in range(len(capture.sources)):
        figures = _percentile_errors([(r, t) for r, t in kept if r.source == source])
        report.by_source.append(
            {"held_out": figures, "held_out_error": mean_error(figures) if figures else None}
        )
    end = capture.requests[-1].arrival or 1.0
    report.slices = []
    for s in range(SLICES):
        lo, hi = s * end / SLICES, (s + 1) * end / SLICES
        inside = [
            (i, r, t)
            for i, (r, t) in enumerate(pairs)
            if r.measured and (lo <= r.arrival < hi or (s == SLICES - 1 and r.arrival == end))
        ]
        row: dict[str, Any] = {
            "start_s": lo,
            "end_s": hi,
            "requests": len(inside),
            "held_out": bool(inside) and inside[0][0] in held,
        }
        for kind in ("ttft", "tpot"):
            got = [(getattr(r, kind), getattr(t, kind)) for _, r, t in inside]
            got = [(m, p) for m, p in got if m is not None and p is not None]
            if got:
                m = percentile([m for m, _ in got], 50)
                row[f"{kind}_p50_error"] = percentile([p for _, p in got], 50) / m - 1 if m else 0
        report.slices.append(row)


def _percentile_errors(
    pairs: list[tuple[Captured, deployment.Timing]],
    figures: Callable[[Captured | deployment.Timing], dict[str, float | None]] = client_figures,
) -> dict[str, dict[str, float]]:
    """Measured against predicted P50 and P90 of TTFT and TPOT (the client's, or as
    `figures` reads them) over these requests: a comparison of spreads, so it holds for
    rebuilt arrivals too."""
    out = {}
    for kind in ("ttft", "tpot"):
        for q in (50, 90):
            read = [(figures(r)[kind], figures(t)[kind]) for r, t in pairs]
            measured = [m for m, _ in read if m is not None]
            predicted = [p for m, p in read if m is not None and p is not None]
            if measured and len(predicted) == len(measured):  # every one predicted
                m, p = percentile(measured, q), percentile(predicted, q)
                out[f"{kind}_p{q}"] = {
                    "measured": m,
                    "predicted": p,
                    "error": p / m - 1 if m else 0.0,
                }
    return out
