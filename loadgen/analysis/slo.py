"""Service-level objectives: the latency limits goodput, verdicts and capacity judge against.

`--slo METRIC=DURATION[@pNN]`: a limit on ttft, tpot or e2e, in seconds, optionally at a
percentile (`ttft=800ms@p90`). Given any, a run is judged against exactly those: a user who
asked only for a TTFT limit is not refused for a TPOT one they never set. Given none, the
defaults (DEFAULT_SLO) judge TTFT and TPOT. Goodput judges each request against the limits alone;
a percentile says where a whole level is judged (compare's verdicts, capacity's probes), and
one not given is DEFAULT_PERCENTILE (compare falls back further when the sample is short).
`check` is that judgement, one definition for a whole run (compare) and its time slices: the
percentile of a sample against the limit, held or missed, or unknown when the sample is too
small to have that percentile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from latency_proxy.base.units import parse_duration
from loadgen.analysis.stats import PERCENTILES

DEFAULT_SLO = {"ttft": 0.8, "tpot": 0.05}
DEFAULT_PERCENTILE = "p99"
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}  # summary.json's metric blocks


@dataclass(frozen=True, slots=True)
class Slos:
    limits: dict[str, float]  # metric -> seconds
    percentiles: dict[str, str] = field(default_factory=dict)  # only those given with @pNN

    def percentile(self, metric: str, default: str = DEFAULT_PERCENTILE) -> str:
        return self.percentiles.get(metric, default)

    def describe(self) -> str:
        """ "TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90)": the limits, as a sentence says them."""
        return describe(self.limits, {m: self.percentile(m) for m in self.limits})


@dataclass(frozen=True, slots=True)
class Check:
    """One SLO against one sample's percentile of its metric."""

    metric: str  # ttft, tpot or e2e
    percentile: str  # p50 … p999
    limit: float  # seconds
    value: float | None  # seconds; None: too few samples to have this percentile
    count: int  # the sample's size

    @property
    def held(self) -> bool | None:
        """At or under the limit; None when the sample cannot tell."""
        return None if self.value is None else self.value <= self.limit


def check(
    slos: Slos, blocks: Mapping[str, Mapping[str, Any]], default: str = DEFAULT_PERCENTILE
) -> list[Check]:
    """Each SLO against the percentile it names (`default` where it names none) of its
    metric's block ({"p90": seconds or None, "count": n}, as summary.json's `metrics` hold
    them, keyed ttft_s, tpot_s, e2e_s)."""
    out = []
    for metric, limit in slos.limits.items():
        pct = slos.percentile(metric, default)
        block = blocks.get(METRICS[metric]) or {}
        out.append(Check(metric, pct, limit, block.get(pct), block.get("count") or 0))
    return out


def percentile_label(key: str) -> str:
    """p90 -> P90, p999 -> P99.9."""
    return key.upper().replace("P999", "P99.9")


def named(metric: str, pct: str) -> str:
    """ttft, p90 -> "TTFT P90": an SLO's figure as every sentence names it."""
    return f"{LABELS[metric]} {percentile_label(pct)}"


def describe(limits: Mapping[str, float], percentiles: Mapping[str, str] | None = None) -> str:
    parts = []
    for metric, limit in limits.items():
        text = f"{LABELS[metric]} ≤ {limit * 1e3:g} ms"
        if percentiles and metric in percentiles:
            text += f" ({percentile_label(percentiles[metric])})"
        parts.append(text)
    return " and ".join(parts)


def default_slos() -> str:
    """ "ttft=800ms tpot=50ms at p99": the defaults as --slo would write them (for --help)."""
    items = " ".join(f"{m}={v * 1e3:g}ms" for m, v in DEFAULT_SLO.items())
    return f"{items} at {DEFAULT_PERCENTILE}"


def _percentile(text: str, item: str) -> str:
    key = text.strip().lower().replace("p99.9", "p999")
    if key not in PERCENTILES:
        raise ValueError(f"not an SLO percentile: {item!r} (use @p50, @p90, @p99 or @p99.9)")
    return key


def parse_slos(items: Sequence[str]) -> Slos:
    """`--slo ttft=800ms@p90 --slo tpot=50ms` -> limits {"ttft": 0.8, "tpot": 0.05},
    percentiles {"ttft": "p90"}; no item at all: the default limits."""
    limits: dict[str, float] = {} if items else dict(DEFAULT_SLO)
    percentiles = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in LABELS:
            raise ValueError(f"not an SLO: {item!r} (use ttft=800ms, tpot=50ms@p90 or e2e=10s@p99)")
        duration, at, pct = value.partition("@")
        limits[name] = parse_duration(duration)
        if not limits[name] > 0:  # a limit of 0 no request can meet, and ratios divide by it
            raise ValueError(f"not an SLO: {item!r}: an SLO's limit must be above 0")
        if at:
            percentiles[name] = _percentile(pct, item)
    return Slos(limits, percentiles)
