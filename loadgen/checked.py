"""The reports' sentences for what speed alone does not show: whether answers were right
and stayed the same, and what the throughput costs in money and energy. Pure."""

from __future__ import annotations

from typing import Any


def accuracy(q: dict[str, Any]) -> str:
    lo, hi = q["interval"]
    return (
        f"{q['accuracy'] * 100:.1f}% ({q['correct']} of {q['items']} items; "
        f"95% CI {lo * 100:.1f}–{hi * 100:.1f}%)"
    )


def identical(c: dict[str, Any]) -> str:
    text = f"{c['share'] * 100:.1f}% identical ({c['identical']} of {c['prompts']} prompts)"
    first = c["first_difference"]
    if first is not None:
        text += f"; the others first differ at word {first['median']:g} (median)"
        text += f", {first['min']} (min)"
    return text


def price(c: dict[str, Any]) -> str:
    text = f"${c['usd_per_mtok_output']:.2f} / Mtok out"
    if c["usd_per_mtok_input"] is not None:
        text += f", ${c['usd_per_mtok_input']:.2f} / Mtok in"
    return text


def joules(e: dict[str, Any]) -> str:
    return f"{e['joules_per_output_token']:.2f} J / output token"


def lines(t: dict[str, Any]) -> list[str]:
    """report.md's bullets for one target; none for blocks it has not."""
    out = []
    if "quality" in t:
        out.append(f"- answers: {accuracy(t['quality'])}, over {t['quality']['answers']} answers")
    if "consistency" in t:
        out.append(f"- greedy under load against alone: {identical(t['consistency'])}")
    if "cost" in t:
        c = t["cost"]
        out.append(
            f"- cost at ${c['usd_per_hour']:.2f}/h: {price(c)} "
            f"(input tokens carry {c['input_time_share'] * 100:.1f}% of the time: "
            "the share before the first token)"
        )
    if "energy" in t:
        e = t["energy"]
        per_watt = e["goodput_per_watt"]
        out.append(
            f"- energy: {joules(e)} at {e['mean_power_w']:.0f} W (all GPUs, from the "
            f"{e['source']})"
            + ("" if per_watt is None else f"; goodput {per_watt * 1000:.2f} req/s per kW")
        )
    return out


def console(name: str, t: dict[str, Any]) -> list[str]:
    """The console's lines under the table, one per figure the target has."""
    out = []
    if "quality" in t:
        out.append(f"{name}: accuracy {accuracy(t['quality'])}")
    if "consistency" in t:
        out.append(f"{name}: consistency {identical(t['consistency'])}")
    if "cost" in t:
        out.append(f"{name}: {price(t['cost'])}")
    if "energy" in t:
        out.append(f"{name}: {joules(t['energy'])}")
    return out
