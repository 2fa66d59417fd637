"""Service-level objectives: the latency limits goodput and verdicts judge requests against.

Keyed by metric (ttft, tpot, e2e), in seconds. `--slo` overrides one at a time; the ones not
named keep their defaults, so a run is always judged against TTFT and TPOT at least.
"""

from __future__ import annotations

from collections.abc import Sequence

from latency_proxy.units import parse_duration

DEFAULT_SLO = {"ttft": 0.8, "tpot": 0.05}


def parse_slos(items: Sequence[str]) -> dict[str, float]:
    """`--slo ttft=800ms --slo tpot=50ms` -> {"ttft": 0.8, "tpot": 0.05}; unnamed keep defaults."""
    slo = dict(DEFAULT_SLO)
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in ("ttft", "tpot", "e2e"):
            raise ValueError(f"not an SLO: {item!r} (use ttft=800ms, tpot=50ms or e2e=10s)")
        slo[name] = parse_duration(value)
    return slo
