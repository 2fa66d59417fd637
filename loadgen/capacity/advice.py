"""A capacity search's answer in words: per target, how much load holds, what breaks first
above it, and what to do when it is less than the traffic asked about. Pure: capacity.json's
dictionary in, one sentence out, for every axis alike.

"At TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90), this traffic can grow 1.7x on llama-70b
before TTFT P90 passes 800 ms (1.24 s at 1.8x); qwen-72b holds 0.4x of this traffic before
TPOT P90 passes 50 ms (61 ms at 0.45x): it needs at least 3 replicas like this one."

A replay of agents' sessions says its speed in sessions started a minute too ("1.7x (41
sessions/min)"): the trace window's sessions over its length, times the speed.

A virtual: target's clause names its twin ("one replica of virtual:fitted with --max-num-seqs
128") and says that its figure is predicted, and how far to trust it: the held-out error
its fitted preset carries (of the binding SLO's figure when the fit checked it, else the
mean of TTFT and TPOT P50/P90), or that a bundled preset was fitted to no server.

What binds is what failed at the lowest failing probe (capacity.json's `binding` and
`binding_slo`). Replicas are ceil(1 / capacity), a lower bound: it assumes round-robin
replicas each take an even share and scale perfectly, which they do not quite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from loadgen.analysis import checked
from loadgen.analysis.slo import Slos, named
from loadgen.capacity.axis import AXES, Axis
from loadgen.capacity.verdict import MAX_FAILED, seconds


def slos_of(result: Mapping[str, Any]) -> Slos:
    """The SLOs capacity.json was searched against."""
    slo = result["slo"]
    return Slos(
        {m: v["limit_s"] for m, v in slo.items()}, {m: v["percentile"] for m, v in slo.items()}
    )


def replicas(capacity: float) -> int:
    """Fewest replicas of one that holds `capacity` of the traffic that would hold all of it."""
    return math.ceil(round(1 / capacity, 9))


def _upper(t: Mapping[str, Any]) -> float | None:
    """The lowest level that did not meet: failing, or still undecided."""
    above = [*t["undecided"], *([t["bracket"][1]] if t["bracket"][1] is not None else [])]
    return min(above, default=None)


def _holds(name: str, t: Mapping[str, Any], axis: Axis, first: bool) -> str:
    """ "qwen-72b sustains 3.1 req/s (790 output tok/s)", "this traffic can grow 1.7x on
    llama-70b", "llama-70b holds 0.4x of this traffic"; an agents' trace's speed also in
    the sessions it starts: "this traffic can grow 1.7x (41 sessions/min) on llama-70b"."""
    level = t["capacity"]
    amount = ("at least " if _upper(t) is None else "") + axis.amount(level)
    if sessions := t.get("sessions_per_min"):
        amount += f" ({_per_minute(sessions)} sessions/min)"
    if not axis.relative:
        tokens = t["output_tokens_per_s"]
        said = f"{name} sustains {amount}"
        return said + (f" ({tokens:.0f} output tok/s)" if first and tokens is not None else "")
    if level > 1:
        return f"this traffic can grow {amount} on {name}"
    return f"{name} holds {amount} of this traffic"


def _per_minute(value: float) -> str:
    """41.2 -> "41.2", 1234.5 -> "1,234", 0.0523 -> "0.0523": three significant digits,
    whole above a hundred."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def binds(t: Mapping[str, Any], axis: Axis) -> str:
    """What ends the range above the capacity, as the end of a sentence: " before TTFT P90
    passes 800 ms (1.24 s at 2x)"; "" when nothing above it was found to fail."""
    failing = t["bracket"][1]
    slo = t.get("binding_slo")
    if slo:
        name = named(slo["metric"], slo["percentile"])
        return (
            f" before {name} passes {seconds(slo['limit_s'])} "
            f"({seconds(slo['value_s'])} at {axis.amount(slo['level'])})"
        )
    if t["binding"] == "steady_state":
        below, above = axis.amount(t["bracket"][0]), axis.amount(failing)
        return f" before it falls behind the load (it saturates between {below} and {above})"
    if t["binding"] == "errors":
        return (
            f" before more than {MAX_FAILED:.0%} of its requests fail (at {axis.amount(failing)})"
        )
    if t["undecided"]:
        return f", with {axis.amount(min(t['undecided']))} still undecided"
    return ""


def _called(name: str, twin: Mapping[str, Any] | None) -> str:
    """A target as the sentence names it: a virtual one with its replicas and what-if flags."""
    if not twin:
        return name
    replicas = twin["replicas"]
    said = f"{'one replica' if replicas == 1 else f'{replicas} replicas'} of {name}"
    return said + (f" with {twin['args']}" if twin.get("args") else "")


def _share(error: float) -> str:
    """0.071 -> "7.1%", 0.12 -> "12%", 0.0004 -> "under 0.1%": two significant digits."""
    return "under 0.1%" if abs(error) < 0.001 else f"{abs(error) * 100:.2g}%"


def trust(t: Mapping[str, Any]) -> str:
    """How a virtual: target's figure was predicted and how far to trust it; "" for a server."""
    if not t.get("predicted"):
        return ""
    said = basis(t["predicted"], t.get("binding_slo"))
    return f"predicted {said}" if said.startswith("from") else f"predicted; {said}"


def basis(twin: Mapping[str, Any], slo: Mapping[str, Any] | None = None) -> str:
    """What a prediction rests on: the fit's held-out error (on `slo` when the fit checked
    that figure), or the preset that was fitted to no server."""
    if twin["bundled"]:
        kind = "an uncalibrated" if twin.get("uncalibrated") else "a"
        return f"from {kind} bundled preset; not fitted to your server"
    fit = twin.get("fit")
    if not fit and twin.get("uncalibrated"):  # derived from the GPU catalogue, say
        return "from an uncalibrated preset; not fitted to your server"
    if not fit:
        return "from a preset file that records no held-out error"
    if slo and (key := f"{slo['metric']}_{slo['percentile']}") in fit:
        said = f"held-out error {_share(fit[key])} on {named(slo['metric'], slo['percentile'])}"
    else:
        said = f"held-out error {_share(fit['error'])}"
    if twin.get("what_if"):
        said += f", fitted without {twin['what_if']}"
    return said


def clause(name: str, t: Mapping[str, Any], axis: Axis, precision: float, first: bool) -> str:
    """One target's part of the sentence: how much holds, what breaks first above it, how
    many replicas a share under the whole traffic calls for, how sure the figure is, and
    whether it was predicted."""
    said = _measured(_called(name, t.get("predicted")), t, axis, precision, first)
    predicted = trust(t)
    return f"{said} ({predicted})" if predicted else said


def _measured(name: str, t: Mapping[str, Any], axis: Axis, precision: float, first: bool) -> str:
    level, upper = t["capacity"], _upper(t)
    if level is None:
        said = f"{name} meets them at no level tried"
        if t["undecided"]:
            said += f" ({', '.join(axis.amount(v) for v in t['undecided'])}: undecided)"
        elif axis.relative and upper is not None:  # even the lowest failed: s < upper
            said += f": it needs at least {math.floor(1 / upper) + 1} replicas like this one"
        return said
    said = _holds(name, t, axis, first) + binds(t, axis)
    at_capacity = [
        text(t[block]) for block, text in (("cost", checked.price), ("energy", checked.joules))
        if block in t
    ]  # fmt: skip
    if at_capacity:
        said += f" (at {axis.amount(level)}: {', '.join(at_capacity)})"
    if axis.relative and level < 1:
        said += f": it needs at least {replicas(level)} replicas like this one"
    if upper is None:
        said += " (nothing above it was tried)"
    elif not t["converged"]:
        said += (
            f" (bracket [{level:g}, {upper:g}] still wider than {precision:.0%}: the true "
            "figure may be higher)"
        )
    return said


def sentence(result: Mapping[str, Any]) -> str:
    """The closing sentence: the SLOs, each target's clause (the highest capacity first), and
    the headroom of the strongest at the weakest one's capacity."""
    axis = AXES[result["by"]]
    found = sorted(
        ((n, t) for n, t in result["targets"].items() if t["capacity"] is not None),
        key=lambda item: -item[1]["capacity"],
    )
    parts = [
        clause(name, t, axis, result["precision"], i == 0) for i, (name, t) in enumerate(found)
    ]
    parts += [
        clause(name, t, axis, result["precision"], False)
        for name, t in result["targets"].items()
        if t["capacity"] is None
    ]
    said = f"At {slos_of(result).describe()}, " + "; ".join(parts)
    if len(found) >= 2:
        (top, strong), (_, weak) = found[0], found[-1]
        headroom = strong["capacity"] / weak["capacity"] - 1
        said += f"; at {axis.amount(weak['capacity'])} {top} still has {headroom:.0%} headroom"
    return said + "."
