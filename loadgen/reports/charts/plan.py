"""The chart of a plan, from plan.json alone: every searched deployment that met the SLOs at
this traffic, its $/hour against its headroom (how much more of the traffic it holds), each
candidate a colour, and the cost–headroom Pareto front through those no cheaper deployment
beats on headroom."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.reports.charts.model import Chart, Figure, Series

FILE = "plan.png"


def _tip(p: Mapping[str, Any]) -> str:
    return (
        f"{p['replicas']} × {p['name']}: ${p['usd_per_hour']:,.2f}/h, "
        f"headroom {p['headroom']:.0%}" + (" (on the front)" if p["front"] else "")
    )


def cost_headroom(result: Mapping[str, Any]) -> Figure | None:
    points = result.get("front") or []
    if not points:
        return None
    names = list(dict.fromkeys(p["name"] for p in points))
    series = []
    for group, name in enumerate(names):
        mine = [p for p in points if p["name"] == name]
        series.append(
            Series(
                name,
                tuple((p["usd_per_hour"], p["headroom"] * 100) for p in mine),
                "scatter",
                group=group,
                tips=tuple(_tip(p) for p in mine),
            )
        )
    best = [p for p in points if p["front"]]
    series.append(
        Series(
            "front",
            tuple((p["usd_per_hour"], p["headroom"] * 100) for p in best),
            "line",
            True,
            len(names),
            tuple(_tip(p) for p in best),
        )
    )
    chart = Chart(
        "plan-front",
        "Cost against headroom",
        "USD per hour",
        "headroom (%)",
        tuple(series),
        note="headroom: how much more of this traffic a deployment holds before an SLO breaks; "
        "up and left is better: a point right of or below the front is beaten by another",
    )
    return Figure(FILE, "Cost against headroom", (chart,))
