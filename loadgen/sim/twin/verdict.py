"""A fit from start to verdict: which terms the capture can identify, the search (fit.py),
the front end kept or not, and how well the fitted twin predicts what it was not fitted
on. Pure, no I/O.

The capture's last `holdout` share of requests (by arrival) is never fitted to: the fitted
twin replays the whole capture and its P50 and P90 of TTFT and TPOT over those requests are
set against the measured ones. That is the error a user should expect of a what-if, and it
decides the front end: its two terms are kept only when they lower it. When the capture has
the server's own timings, the engine is fitted to those (fit._engine_timed) and the front
end, with the engine's terms held, to the client's TTFT alone: the time between the client
and the engine (API server, network, proxy) is what it stands for. The server's own TTFT
and TPOT are then judged on the held-out requests too (`held_out_server`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import deployment, fit
from loadgen.sim.twin.capture import Capture, Captured
from loadgen.sim.twin.fit import FRONTEND, TERMS, Fitted, Search, Targets, Term

QUIET = 0.002  # a term whose STEP change moves the fitted figures less (rms, log) is unseen
FRONTEND_START = {"frontend_request": 1e-3, "frontend_token": 1e-6}
TIED = 0.95  # |correlation| of two terms' bootstrap estimates above which they are one
FRONTEND_GAIN = 0.005  # held-out error (mean over its four figures) the front end must save


@dataclass(slots=True)
class Report:
    values: dict[str, float]  # every term's value in the fitted preset
    base: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    not_identified: dict[str, str] = field(default_factory=dict)  # term: why, in words
    held_out: dict[str, dict[str, float]] = field(default_factory=dict)
    held_out_server: dict[str, dict[str, float]] = field(default_factory=dict)
    slices: list[dict[str, Any]] = field(default_factory=list)
    frontend: dict[str, Any] = field(default_factory=dict)
    replays: int = 0

    def held_out_error(self) -> float:
        """The mean absolute error of the held-out P50 and P90 of TTFT and TPOT."""
        errors = [abs(v["error"]) for v in self.held_out.values()]
        return sum(errors) / len(errors) if errors else math.inf


def calibrate(base: Preset, capture: Capture, holdout: float = 0.3, replicas: int = 1) -> Report:
    """The fitted terms of `base` for `capture`, with their intervals and the held-out error."""
    n = len(capture.requests)
    cut = n - max(1, round(n * holdout)) if holdout > 0 else n
    targets = Targets.of(capture, range(cut))
    search = Search(base, capture, targets, replicas)
    start = {t.name: t.get(base) for t in (*TERMS, *FRONTEND)}
    first = deployment.run(base, search.requests, replicas)
    reasons = physics(base, first.steps)
    free = [t for t in TERMS if t.name not in reasons]
    fitted, free, hull = _narrowed(search, start, start, free, reasons)
    report = _report(start, fitted, reasons, search.replays)
    # a term's interval spans every round it was free in: with a partner it trades off with
    # fixed at the base value, its own interval alone would claim a certainty it lacks
    report.intervals = {k: hull[k] for k in report.intervals}
    _judge(report, search, capture, cut)
    without = report.held_out_error()
    if any(fit._engine_timed(r) for r in capture.requests[:cut]):  # the engine's are held
        client = Targets.of(capture, range(cut), only=frozenset({"ttft"}))
        alone = Search(base, capture, client, replicas)
        # of a per-request and a per-token cost that trade off, one is fixed (at 0) and the
        # other carries both, as the engine's tied terms do
        tied = dict(reasons)
        first = report.values | _gap_start(capture.requests[:cut])
        with_frontend, _, _ = _narrowed(
            alone, report.values, first, list(FRONTEND), tied, resume=False
        )
        search.replays += alone.replays
        trial = _report(report.values, with_frontend, tied, search.replays)
        trial.base, trial.intervals = dict(start), report.intervals | trial.intervals
    else:
        with_frontend = fit.fit(search, fitted.values | FRONTEND_START, [*free, *FRONTEND])
        trial = _report(start, with_frontend, dict(reasons), search.replays)
    _judge(trial, search, capture, cut)
    gain = without - trial.held_out_error()
    front = [t.name for t in FRONTEND if t.name in with_frontend.free]
    unclear = {name: why for name in front if (why := why_not(with_frontend, name))}
    frontend_words = {
        "held_out_error_without": without,
        "held_out_error_with": trial.held_out_error(),
    }
    if front and gain >= FRONTEND_GAIN and not unclear and not unidentified(with_frontend):
        trial.frontend = frontend_words | {"kept": True}
        trial.replays = search.replays
        return trial
    why = (
        f"held-out error {trial.held_out_error():.1%} with a front end against {without:.1%} "
        "without: not kept"
    )
    for term in FRONTEND:
        report.not_identified[term.name] = unclear.get(term.name) or trial.not_identified.get(
            term.name, why
        )
    report.frontend = frontend_words | {"kept": False}
    report.replays = search.replays
    return report


def _gap_start(requests: list[Captured]) -> dict[str, float]:
    """Where the front end's search starts: the median gap between the client's TTFT and
    the server's, half of it a cost per request and half one per prompt token (from
    FRONTEND_START's scale a search whose first steps gain little stops before it
    reaches a gap of tens of milliseconds)."""
    gaps, prompts = [], []
    for r in requests:
        server = server_figures(r)["ttft"]
        if r.ttft is not None and server is not None:
            gaps.append(r.ttft - server)
            prompts.append(r.prompt_tokens)
    if not gaps:
        return dict(FRONTEND_START)
    gap = max(percentile(gaps, 50), FRONTEND_START["frontend_request"])
    mean_prompt = max(1.0, sum(prompts) / len(prompts))
    return {"frontend_request": gap / 2, "frontend_token": gap / 2 / mean_prompt}


def _narrowed(
    search: Search,
    base: dict[str, float],
    first: dict[str, float],
    free: list[Term],
    reasons: dict[str, str],
    resume: bool = True,
) -> tuple[Fitted, list[Term], dict[str, tuple[float, float]]]:
    """The fit of the `free` terms from `first`, refitted with each term the capture cannot
    identify fixed at its `base` value (and its reason added to `reasons`) until every free
    one is identified; with the terms left free and the hull of their intervals. Each refit
    starts where the last stopped, or (`resume` false) from `first` again: a term its tied
    partner left at its floor would look unseen there."""
    fitted = fit.fit(search, first, free)
    reasons |= unidentified(fitted)
    hull = dict(fitted.intervals)
    while any(name in reasons for name in fitted.free):
        free = [t for t in free if t.name not in reasons]
        last = fitted.values if resume else first
        kept = base | {k: v for k, v in last.items() if k in {t.name for t in free}}
        fitted = fit.fit(search, kept, free)
        reasons |= unidentified(fitted)
        hull = _hull(hull, fitted.intervals)
    return fitted, free, hull


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


def unidentified(fitted: Fitted) -> dict[str, str]:
    """Free terms the search could not pin down, each with why: every term the figures do
    not move with, and of those whose interval is too wide only the widest for its range
    (two terms that trade off are both wide until one of them is fixed)."""
    reasons = {n: why for n in fitted.free if (why := why_not(fitted, n)) and _quiet(fitted, n)}
    wide = [n for n in fitted.free if n not in reasons and why_not(fitted, n)]
    # two terms whose estimates move together are one term to this capture, however
    # narrow each interval looks from where the search stopped
    tied = [n for n in fitted.free if n not in reasons and abs(fitted.partner[n][1]) > TIED]
    if wide:
        # widest for its range: a term confined to ×15 (MBU) that spans all of it is
        # less known than one that spans ×35 of a ×10,000 range (the host overhead)
        name = max(wide, key=lambda n: fitted.spread[n] / _log_range(n))
        reasons[name] = why_not(fitted, name) or ""
    elif tied:  # of a tied pair, the one the figures see less
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
    values = dict(start) | {name: fitted.values[name] for name in fitted.free}
    return Report(
        values=values,
        base=dict(start),
        intervals={k: v for k, v in fitted.intervals.items() if k not in reasons},
        not_identified=dict(reasons),
        replays=replays,
    )


def _judge(report: Report, search: Search, capture: Capture, cut: int) -> None:
    """The held-out error and the error per time slice, of the report's values."""
    timings = search.timings(report.values)
    pairs = list(zip(capture.requests, timings, strict=True))
    held = [(r, t) for r, t in pairs[cut:] if r.measured]
    client = [(client_figures(r), client_figures(t)) for r, t in held]
    server = [(server_figures(r), server_figures(t)) for r, t in held]
    report.held_out = _errors(client)
    report.held_out_server = _errors(server)
    end = capture.requests[-1].arrival or 1.0
    report.slices = []
    for s in range(fit.SLICES):
        lo, hi = s * end / fit.SLICES, (s + 1) * end / fit.SLICES
        inside = [
            (i, r, t)
            for i, (r, t) in enumerate(pairs)
            if r.measured and (lo <= r.arrival < hi or (s == fit.SLICES - 1 and r.arrival == end))
        ]
        row: dict[str, Any] = {
            "start_s": lo,
            "end_s": hi,
            "requests": len(inside),
            "held_out": bool(inside) and inside[0][0] >= cut,
        }
        for kind in ("ttft", "tpot"):
            got = [(getattr(r, kind), getattr(t, kind)) for _, r, t in inside]
            got = [(m, p) for m, p in got if m is not None and p is not None]
            if got:
                m = percentile([m for m, _ in got], 50)
                row[f"{kind}_p50_error"] = percentile([p for _, p in got], 50) / m - 1 if m else 0
        report.slices.append(row)


def client_figures(r: Captured | deployment.Timing) -> dict[str, float | None]:
    """TTFT and TPOT as the client saw them (a capture's) or would (the twin's)."""
    return {"ttft": r.ttft, "tpot": r.tpot}


def server_figures(r: Captured | deployment.Timing) -> dict[str, float | None]:
    """The server's own TTFT (queue and prefill) and TPOT (decode per token after the
    first), of a captured request (None without its timings) or of the twin's."""
    if isinstance(r, deployment.Timing):
        queue, prefill, decode = r.queue, r.prefill, r.decode
    else:
        queue, prefill, decode = r.server_queue, r.server_prefill, r.server_decode
    n = r.output_tokens
    return {
        "ttft": None if queue is None or prefill is None else queue + prefill,
        "tpot": None if decode is None or n < 2 else decode / (n - 1),
    }


def _errors(
    pairs: list[tuple[dict[str, float | None], dict[str, float | None]]],
) -> dict[str, dict[str, float]]:
    """P50 and P90 of TTFT and TPOT, measured against predicted, over the requests that
    have the measured figure."""
    out = {}
    for kind in ("ttft", "tpot"):
        measured = [m[kind] for m, _ in pairs]
        predicted = [p[kind] for m, p in pairs if m[kind] is not None]
        values = [v for v in measured if v is not None]
        guessed = [v for v in predicted if v is not None]
        if not values or len(guessed) < len(predicted):
            continue
        for q in (50, 90):
            m, p = percentile(values, q), percentile(guessed, q)
            out[f"{kind}_p{q}"] = {"measured": m, "predicted": p, "error": p / m - 1 if m else 0.0}
    return out


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between order statistics."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)
