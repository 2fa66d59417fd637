"""The figures a fit matches: each captured request's TTFT and TPOT (and the server's queue,
prefill and decode times, when captured) against the twin's, in log ratio, grouped so that
a figure that hinges on where a request falls between steps is matched by a group's mean,
and a load rebuilt from percentiles by its quantiles. Pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.sim.twin import deployment
from loadgen.sim.twin.capture import Capture, Captured
from loadgen.sim.twin.sensitivity import Sensitivity

GROUP = 30  # requests per group of the figures fitted by group (see Targets)


SLICES = 10  # bootstrap blocks and the per-slice error


PER_REQUEST = ("tpot", "decode")  # figures fitted request by request (see Targets)


FLOOR = {"ttft": 1e-3, "tpot": 1e-4, "queue": 1e-3, "prefill": 1e-3, "decode": 1e-3}


def figures(r: Captured) -> dict[str, float | None]:
    return {
        "ttft": r.ttft,
        "tpot": r.tpot,
        "queue": r.server_queue,
        "prefill": r.server_prefill,
        "decode": r.server_decode,
    }


def engine_timed(r: Captured) -> set[str]:
    """The client's figures a request's server timings stand for. The client's TTFT and
    TPOT also hold the API server, the network and delivery (on a busy box, tokens reach
    the client in bursts), which no engine term times: fitted beside the server's own
    figures they pull the engine's terms off (real vLLM on a CPU: MFU from 0.3 to 0.12 to
    stretch prefills the server timed at a few milliseconds). The held-out check still
    judges the client's figures."""
    shadowed = set()
    if r.server_queue is not None and r.server_prefill is not None:
        shadowed.add("ttft")
    if r.server_decode is not None:
        shadowed.add("tpot")
    return shadowed


def simulated(t: deployment.Timing) -> dict[str, float | None]:
    return {
        "ttft": t.ttft,
        "tpot": t.tpot,
        "queue": t.queue,
        "prefill": t.prefill,
        "decode": t.decode,
    }


@dataclass(frozen=True, slots=True)
class Targets:
    """The figures fitted to, each a group of requests' mean log figure: one request for
    the figures a request averages over many steps (TPOT, decode), and requests of one time
    slice and one third of the prompt lengths for those that hinge on where a request falls
    between steps (TTFT, queue, prefill): a shift of the schedule by one step moves a single
    request's TTFT by a whole step, but not a group's mean."""

    # requests, kind, log, weight, and the quantile the group stands for (None: its mean)
    groups: list[tuple[tuple[int, ...], str, float, float, float | None]]
    slice_of: list[int]  # each group's time slice (for the bootstrap)
    kinds: int  # kinds of figure captured (each weighs one)

    @classmethod
    def of(
        cls, capture: Capture, chosen: Sequence[int], only: frozenset[str] | None = None
    ) -> Targets:
        """The groups of the `chosen` requests; `only`: these kinds of figure and no other,
        the client's included where the server's timings stand for them (engine_timed)."""
        measured = [i for i in chosen if capture.requests[i].measured]
        end = capture.requests[-1].arrival or 1.0
        slice_of = {
            i: min(SLICES - 1, int(capture.requests[i].arrival / end * SLICES)) for i in measured
        }
        # groups of about GROUP requests: time slices merged in runs of `merge`
        merge = max(1, min(SLICES, round(3 * GROUP * SLICES / max(1, len(measured)))))
        prompts = sorted(capture.requests[i].prompt_tokens for i in measured)
        thirds = [prompts[len(prompts) // 3], prompts[2 * len(prompts) // 3]] if prompts else []
        keyed: dict[tuple[str, int, int], list[tuple[int, float]]] = {}
        rebuilt: dict[tuple[str, int], list[tuple[int, float]]] = {}
        for i in measured:
            r = capture.requests[i]
            third = sum(r.prompt_tokens > t for t in thirds)
            for kind, value in figures(r).items():
                skipped = kind not in only if only is not None else kind in engine_timed(r)
                if value is None or skipped:
                    continue
                if r.rebuilt:  # its arrival is not the one measured: only the spread counts
                    rebuilt.setdefault((kind, r.source), []).append((i, value))
                    continue
                grouped = (kind, slice_of[i] // merge, third)
                key = (kind, i, 0) if kind in PER_REQUEST else grouped
                keyed.setdefault(key, []).append((i, math.log(value + FLOOR[kind])))
        counts: dict[str, int] = {}
        for kind, *_ in keyed:
            counts[kind] = counts.get(kind, 0) + 1
        for kind, _ in rebuilt:
            counts[kind] = counts.get(kind, 0) + len(QUANTILES)
        groups: list[tuple[tuple[int, ...], str, float, float, float | None]] = []
        slices = []
        for (kind, where, _), members in keyed.items():
            mean = sum(v for _, v in members) / len(members)
            weight = 1 / math.sqrt(counts[kind])
            groups.append((tuple(i for i, _ in members), kind, mean, weight, None))
            slices.append(slice_of[members[0][0]] if kind in PER_REQUEST else where * merge)
        for (kind, _), members in rebuilt.items():
            ordered = sorted(members, key=lambda m: m[1])
            for q in QUANTILES:
                value = _at_rank([v for _, v in ordered], q)
                logged = math.log(value + FLOOR[kind])
                groups.append(
                    (tuple(i for i, _ in members), kind, logged, 1 / math.sqrt(counts[kind]), q)
                )
                slices.append(slice_of[ordered[len(ordered) // 2][0]])
        return cls(groups, slices, len(counts))

    def residuals(self, timings: list[deployment.Timing]) -> list[float]:
        out = []
        for members, kind, logged, weight, q in self.groups:
            value = _group_value(members, kind, q, timings)
            out.append(weight * (value - logged))
        return out

    def jacobian(self, timings: list[deployment.Timing], sens: Sensitivity) -> list[list[float]]:
        """d residual / d log(term) for each of the sensitivity's terms: columns."""
        rows = []
        for members, kind, _logged, weight, q in self.groups:
            total = [0.0] * len(sens.names)
            for i, share in _shares(members, kind, q, timings):
                t = timings[i]
                value = simulated(t)[kind]
                assert value is not None
                if q is not None:  # d log(quantile): the request at that rank moves it
                    value = math.exp(_group_value(members, kind, q, timings)) - FLOOR[kind]
                scale = weight * share / (value + FLOOR[kind])
                for k, d in enumerate(sens.of(i, kind, t)):
                    total[k] += scale * d
            rows.append(total)
        return [list(column) for column in zip(*rows, strict=True)] if rows else []


QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)  # of a rebuilt load's figures, matched one by one


def _at_rank(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between order statistics."""
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _shares(
    members: tuple[int, ...], kind: str, q: float | None, timings: list[deployment.Timing]
) -> list[tuple[int, float]]:
    """The requests a group's figure is made of, each with its share of it: all alike for a
    mean, the two either side of the rank for a quantile."""
    if q is None:
        return [(i, 1 / len(members)) for i in members]
    ordered = sorted(members, key=lambda i: simulated(timings[i])[kind] or 0.0)
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    frac = at - low
    return [(ordered[low], 1 - frac), (ordered[high], frac)]


def _group_value(
    members: tuple[int, ...], kind: str, q: float | None, timings: list[deployment.Timing]
) -> float:
    """The group's simulated figure, in log: its members' mean log, or the log of their
    q-quantile."""
    if q is None:
        total = 0.0
        for i in members:
            value = simulated(timings[i])[kind]
            assert value is not None
            total += math.log(value + FLOOR[kind])
        return total / len(members)
    values = sorted(simulated(timings[i])[kind] or 0.0 for i in members)
    return math.log(_at_rank(values, q) + FLOOR[kind])
