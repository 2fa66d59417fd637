"""Fitting a preset's efficiency terms to a capture on the virtual clock. Pure, no I/O.

The capture's arrivals and lengths run through the twin (deployment.py); the terms are chosen so
that each request's simulated TTFT and TPOT (and the server's queue, prefill and decode
times, when captured) match what was measured (fit_targets.py), in log ratio, each kind weighing
the same. The search is Levenberg–Marquardt on the logs of the terms, clamped inside the
model's ceilings, each candidate one replay whose derivatives come with it
(sensitivity.py). Its Jacobian at the optimum gives the 95% intervals: a bootstrap over
time slices of the capture, each resample one linearised step from the optimum.

Only efficiencies move; the model's shape, the GPU count and the engine's flags are the
base preset's. A term the capture cannot move, or cannot tell from another, keeps the base
value, and the reason is said in words.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import MBU_CEILING, MFU_CEILING
from loadgen.sim.twin import deployment
from loadgen.sim.twin.capture import Capture
from loadgen.sim.twin.fit_targets import SLICES, Targets
from loadgen.sim.twin.sensitivity import ENGINE_TERMS, Sensitivity

STEP = 0.2  # the finite difference, in log of a term: a 22% change (wider than the jumps
# a shifted schedule makes)
POLISH = 0.5  # the linearised optimum is taken within this (log) of where the search stopped
POLISH_LOSS = 1.25  # and only where its loss is at most this much of the search's
MAX_ITERATIONS = 8
TRIES = 6  # damped steps tried per iteration before the search gives up
REACH = 1.0  # no search step moves a term by more than this (log): the derivatives come
# from one schedule, and a term the figures barely see would otherwise jump by ×1000
BOOTSTRAPS = 200
WIDE = math.log(4.0)  # a 95% interval wider than ×4 is no identification
MAX_LOG = 700.0  # the largest log of a term's value that exp() still takes


@dataclass(frozen=True, slots=True)
class Term:
    """One efficiency term: where it lives in a preset and the range it may take."""

    name: str
    table: str  # "efficiency" or "hardware"
    low: float
    high: float

    def get(self, preset: Preset) -> float:
        return getattr(getattr(preset.perf, self.table), self.name)


TERMS = (  # MBU's and MFU's upper ends are the GPU's own ceilings (terms)
    Term("mbu", "efficiency", 0.05, MBU_CEILING * 0.999),
    Term("mfu", "efficiency", 0.02, MFU_CEILING * 0.999),
    Term("host_overhead", "efficiency", 1e-5, 0.1),
    Term("sequence_overhead", "efficiency", 1e-7, 2e-3),
    Term("allreduce_latency", "hardware", 1e-6, 1e-3),
    Term("interconnect_bandwidth", "hardware", 1e9, 2e12),
)
ADMISSION = (  # the front end's work on the way in
    Term("frontend_request", "efficiency", 1e-5, 0.2),
    Term("frontend_token", "efficiency", 1e-9, 1e-4),
)
OUTPUT = Term("frontend_output_token", "efficiency", 1e-7, 1e-2)  # its work on the way out
LATENCY = Term("frontend_latency", "efficiency", 1e-5, 0.2)  # outside the engine, no queue
FRONTEND = (*ADMISSION, OUTPUT, LATENCY)


CEILINGS = {"mbu": "mbu_ceiling", "mfu": "mfu_ceiling"}  # the Hardware field bounding each


def terms(preset: Preset) -> tuple[Term, ...]:
    """TERMS, MBU and MFU bounded by the preset's GPU's ceilings."""
    hw = preset.perf.hardware
    return tuple(
        dataclasses.replace(t, high=getattr(hw, CEILINGS[t.name]) * 0.999)
        if t.name in CEILINGS
        else t
        for t in TERMS
    )


def with_terms(preset: Preset, values: dict[str, float]) -> Preset:
    """The preset with these terms set (by name)."""
    # field name to value, as replace() takes them (a table's fields are not all floats)
    tables: dict[str, dict[str, Any]] = {"efficiency": {}, "hardware": {}}
    for term in (*TERMS, *FRONTEND):
        if term.name in values:
            tables[term.table][term.name] = values[term.name]
    perf = dataclasses.replace(
        preset.perf,
        efficiency=dataclasses.replace(preset.perf.efficiency, **tables["efficiency"]),
        hardware=dataclasses.replace(preset.perf.hardware, **tables["hardware"]),
    )
    return dataclasses.replace(preset, perf=perf)


def requests(capture: Capture) -> list[deployment.Request]:
    """The capture as the twin's requests: a prefix-cache hit is a prefix shared with the
    other requests that had one (a common system prompt, as most hits are)."""
    return [
        deployment.Request(
            r.arrival,
            r.prompt_tokens,
            r.output_tokens,
            prefix=(("capture", r.cached_tokens),) if r.cached_tokens else (),
        )
        for r in capture.requests
    ]


@dataclass(frozen=True, slots=True)
class Fitted:
    values: dict[str, float]  # every term of TERMS (and FRONTEND when fitted)
    free: list[str]  # the terms the search moved
    intervals: dict[str, tuple[float, float]]  # of the free terms
    spread: dict[str, float]  # of the free terms: log-width of the interval
    sensitivity: dict[str, float]  # rms change of the residuals per e-fold of the term
    # of the free terms: the partner its bootstrap estimates correlate with most, and how much
    partner: dict[str, tuple[str, float]]
    loss: float
    replays: int
    # of the free terms: where the linearised optimum lies with no term bounded (a term
    # pinned at a bound says there how far past it the capture would take it)
    unbounded: dict[str, float] = dataclasses.field(default_factory=dict)


class Search:
    """Replays of one capture with candidate terms, counted."""

    def __init__(
        self,
        base: Preset,
        capture: Capture,
        targets: Targets,
        replicas: int,
        on_replay: Callable[[], None] | None = None,
    ) -> None:
        self.base = base
        self.requests = requests(capture)
        self.targets = targets
        self.replicas = replicas
        self.replays = 0
        self.on_replay = on_replay  # told after each replay: a long fit shows its progress

    def timings(self, values: dict[str, float]) -> list[deployment.Timing]:
        preset = with_terms(self.base, values)
        timings = deployment.run(preset, self.requests, self.replicas).timings
        self._replayed()
        return timings

    def _replayed(self) -> None:
        self.replays += 1
        if self.on_replay is not None:
            self.on_replay()

    def residuals(self, values: dict[str, float]) -> list[float]:
        return self.targets.residuals(self.timings(values))

    def evaluate(
        self, values: dict[str, float], names: list[str]
    ) -> tuple[list[float], list[list[float]]]:
        """The residuals at `values` and their derivatives by the log of each named term:
        the engine's from the replay itself (sensitivity.py), the front end's by a
        finite difference (one more replay each)."""
        preset = with_terms(self.base, values)
        engine = [n for n in names if n in ENGINE_TERMS]
        sens = Sensitivity(preset, engine, len(self.requests))
        timings = deployment.run(preset, self.requests, self.replicas, observe=sens).timings
        self._replayed()
        r = self.targets.residuals(timings)
        analytic = dict(zip(engine, self.targets.jacobian(timings, sens), strict=True))
        columns = []
        for name in names:
            if name in analytic:
                columns.append(analytic[name])
                continue
            moved = self.residuals(values | {name: values[name] * math.exp(STEP)})
            columns.append([(a - b) / STEP for a, b in zip(moved, r, strict=True)])
        return r, columns


def fit(search: Search, start: dict[str, float], free: Sequence[Term]) -> Fitted:
    """Levenberg–Marquardt over the logs of the `free` terms, from `start`, then up to two
    Gauss–Newton steps. The loss is rough at the scale of one step's shift of the schedule:
    near the optimum it is the luck of where requests fall between steps, so the search
    stops at a lucky point. The derivatives are smooth: the linearised optimum from there
    is the estimate, unless it lies far off (the linearisation no longer holds)."""
    names = [t.name for t in free]
    bounds = [(math.log(t.low), math.log(t.high)) for t in free]

    def values_at(x: list[float]) -> dict[str, float]:
        return start | {n: math.exp(v) for n, v in zip(names, x, strict=True)}

    def clamp(x: list[float]) -> list[float]:
        return [min(hi, max(lo, v)) for v, (lo, hi) in zip(x, bounds, strict=True)]

    x = clamp([math.log(max(start[n], t.low)) for n, t in zip(names, free, strict=True)])
    r, jacobian = search.evaluate(values_at(x), names)
    loss = _dot(r, r)
    damping = 1e-2
    for _ in range(MAX_ITERATIONS):
        gain = 0.0
        for _ in range(TRIES):
            step = _within(_solve_normal(jacobian, r, [1.0] * len(r), damping), REACH)
            trial = clamp([v + d for v, d in zip(x, step, strict=True)])
            r_trial, j_trial = search.evaluate(values_at(trial), names)
            loss_trial = _dot(r_trial, r_trial)
            if loss_trial < loss:
                gain = (loss - loss_trial) / loss
                x, r, jacobian, loss = trial, r_trial, j_trial, loss_trial
                damping = max(1e-6, damping / 3)
                break
            damping *= 4
        if gain < 1e-3:
            break
    for _ in range(2):
        step = _solve_normal(jacobian, r, [1.0] * len(r), 1e-9)
        if max((abs(d) for d in step), default=0.0) > POLISH:
            break
        polished = clamp([v + d for v, d in zip(x, step, strict=True)])
        r_polished, j_polished = search.evaluate(values_at(polished), names)
        loss_polished = _dot(r_polished, r_polished)
        if loss_polished > loss * POLISH_LOSS:  # the linearisation did not hold there
            break
        x, r, jacobian, loss = polished, r_polished, j_polished, loss_polished
    return _intervals(search, free, x, r, jacobian, values_at(x), loss)


def _intervals(
    search: Search,
    free: Sequence[Term],
    x: list[float],
    r: list[float],
    jacobian: list[list[float]],
    values: dict[str, float],
    loss: float,
) -> Fitted:
    """95% intervals by a block bootstrap over time slices, linearised at the optimum (each
    draw clamped to the term's range)."""
    names = [t.name for t in free]
    slices = search.targets.slice_of
    rng = random.Random(0)
    draws: list[list[float]] = [[] for _ in names]
    # each resample's estimate less the whole capture's: where the search stopped short of
    # the linearised optimum, the intervals still centre on what it chose
    centre = _solve_normal(jacobian, r, [1.0] * len(r), 1e-9)
    for _ in range(BOOTSTRAPS):
        picks = [rng.randrange(SLICES) for _ in range(SLICES)]
        weight_of = [picks.count(s) for s in range(SLICES)]
        weights = [float(weight_of[s]) for s in slices]
        step = _solve_normal(jacobian, r, weights, 1e-9)
        for k, d in enumerate(step):
            term = free[k]
            moved = x[k] + d - centre[k]
            draws[k].append(min(math.log(term.high), max(math.log(term.low), moved)))
    intervals, spread, sensitivity = {}, {}, {}
    for k, name in enumerate(names):
        ordered = sorted(draws[k])
        lo, hi = ordered[int(0.025 * BOOTSTRAPS)], ordered[int(0.975 * BOOTSTRAPS) - 1]
        intervals[name] = (math.exp(lo), math.exp(hi))
        spread[name] = hi - lo
        kinds = search.targets.kinds
        sensitivity[name] = math.sqrt(_dot(jacobian[k], jacobian[k]) / kinds)
    # a term the figures barely see may have its linearised optimum past any float
    unbounded = {
        name: math.exp(min(v + d, MAX_LOG)) for name, v, d in zip(names, x, centre, strict=True)
    }
    partner = {
        name: max(
            ((other, _correlation(draws[k], draws[j])) for j, other in enumerate(names) if j != k),
            key=lambda pair: abs(pair[1]),
            default=("", 0.0),
        )
        for k, name in enumerate(names)
    }
    return Fitted(
        values, names, intervals, spread, sensitivity, partner, loss, search.replays, unbounded
    )


def _correlation(a: list[float], b: list[float]) -> float:
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    da, db = [x - mean_a for x in a], [y - mean_b for y in b]
    norm = math.sqrt(_dot(da, da) * _dot(db, db))
    return _dot(da, db) / norm if norm > 0 else 0.0


def _within(step: list[float], reach: float) -> list[float]:
    """The step shortened (its direction kept) so that no term moves more than `reach`."""
    longest = max((abs(d) for d in step), default=0.0)
    return step if longest <= reach else [d * reach / longest for d in step]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _solve_normal(
    columns: list[list[float]], r: list[float], weights: list[float], damping: float
) -> list[float]:
    """δ minimising Σ w (r + J δ)², damped (Levenberg–Marquardt): (JᵀWJ + λ diag) δ = −JᵀWr."""
    k = len(columns)
    weighted = [[w * v for w, v in zip(weights, col, strict=True)] for col in columns]
    a = [[_dot(weighted[i], columns[j]) for j in range(k)] for i in range(k)]
    b = [-_dot(weighted[i], r) for i in range(k)]
    for i in range(k):
        a[i][i] += damping * (a[i][i] or 1.0)
    return _gauss(a, b)


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a x = b by elimination with partial pivoting (k is a handful)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda i: abs(m[i][c]))
        if abs(m[p][c]) < 1e-300:
            continue
        m[c], m[p] = m[p], m[c]
        for i in range(c + 1, n):
            f = m[i][c] / m[c][c]
            for j in range(c, n + 1):
                m[i][j] -= f * m[c][j]
    x = [0.0] * n
    for i in reversed(range(n)):
        if abs(m[i][i]) < 1e-300:
            continue
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x
