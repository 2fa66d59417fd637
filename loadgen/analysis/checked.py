"""The reports' sentences for what speed alone does not show: whether answers were right
and stayed the same, and what the throughput costs in money and energy. Pure."""

from __future__ import annotations

from typing import Any

from loadgen.analysis import evals, quality

# compared relative figures: (block, key, name, format of one value)
PRICED = (
    ("cost", "usd_per_mtok_output", "$/Mtok out", "${:.3g}"),
    ("energy", "joules_per_output_token", "J/output token", "{:.3g} J"),
)


def accuracy(q: dict[str, Any]) -> str:
    lo, hi = q["interval"]
    return (
        f"{q['accuracy'] * 100:.1f}% ({q['correct']} of {q['items']} items; "
        f"95% CI {lo * 100:.1f}–{hi * 100:.1f}%)"
    )


def unjudged(q: dict[str, Any]) -> str:
    """The clause for answers whose item's regex was cut off; empty when none was."""
    if not q.get("timed_out"):  # absent from runs written before regexes were cut off
        return ""
    limit = evals.REGEX_TIMEOUT_S
    return f"; {q['timed_out']} answers not judged: the item's regex ran past {limit:g} s"


def identical(c: dict[str, Any]) -> str:
    text = f"{c['share'] * 100:.1f}% identical ({c['identical']} of {c['prompts']} prompts)"
    first = c["first_difference"]
    if first is not None:
        text += f"; the others first differ at word {first['median']:g} (median)"
        text += f", {first['min']} (min)"
    return text


def price(c: dict[str, Any]) -> str:
    return f"${c['usd_per_mtok_output']:.2f} / Mtok out"


def split(c: dict[str, Any]) -> str:
    """The hour split by time before the first token: named apart, never the quoted price."""
    text = f"${c['usd_per_mtok_output_split']:.2f} / Mtok out"
    if c["usd_per_mtok_input_split"] is not None:
        text += f", ${c['usd_per_mtok_input_split']:.2f} / Mtok in"
    return text


def joules(e: dict[str, Any]) -> str:
    return f"{e['joules_per_output_token']:.2f} J / output token"


def section(name: str, t: dict[str, Any]) -> list[str]:
    """report.md's section for one target: a bullet per block it has; none without any."""
    said = lines(t)
    return [f"### Answers and cost: {name}", "", *said, ""] if said else []


def lines(t: dict[str, Any]) -> list[str]:
    """One bullet per block the target has."""
    out = []
    if "quality" in t:
        q = t["quality"]
        out.append(f"- answers: {accuracy(q)}, over {q['answers']} answers{unjudged(q)}")
    if "consistency" in t:
        out.append(f"- greedy under load against alone: {identical(t['consistency'])}")
    if "cost" in t:
        c = t["cost"]
        out.append(
            f"- cost at ${c['usd_per_hour']:.2f}/h: {price(c)} (the whole hour over the "
            f"output tokens); split by time, input tokens carrying the "
            f"{c['input_time_share'] * 100:.1f}% before the first token: {split(c)}"
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


def _accuracy_said(q: dict[str, Any]) -> str:
    return f"accuracy {accuracy(q)}{unjudged(q)}"


def _identical_said(c: dict[str, Any]) -> str:
    return f"consistency {identical(c)}"


# the console's line per block, in order
SHORT = {"quality": _accuracy_said, "consistency": _identical_said, "cost": price, "energy": joules}


def console(name: str, t: dict[str, Any]) -> list[str]:
    """The console's lines under the table, one per figure the target has."""
    return [f"{name}: {said(t[block])}" for block, said in SHORT.items() if block in t]


def differences(
    base: str, other: str, a: dict[str, Any], b: dict[str, Any], relative: float, points: float
) -> tuple[list[str], int]:
    """Sentences for the figures of `b` beyond the margin against `a` (relative for cost and
    energy, in points for accuracy), and how many figures both carry were within it."""
    said, same = [], 0
    if "quality" in a and "quality" in b:
        diff = quality.difference(a["quality"], b["quality"], points)
        if diff.beyond_margin:
            word = "lower than" if diff.points < 0 else "higher than"
            size = f"is {abs(diff.points):.1f} points {word}" if diff.points else "equals"
            said.append(
                f"{other}'s accuracy {size} {base}'s ({quality.describe(diff).split(' (', 1)[1]}"
            )
        else:
            same += 1
    if "consistency" in a and "consistency" in b:
        sa, sb = a["consistency"]["share"], b["consistency"]["share"]
        if sa != sb:
            said.append(
                f"{other}'s greedy outputs under load are identical for {sb * 100:.1f}% of "
                f"prompts, {base}'s for {sa * 100:.1f}%"
            )
        else:
            same += 1
    for block, key, name, value in PRICED:
        x, y = (a.get(block) or {}).get(key), (b.get(block) or {}).get(key)
        if x is None or y is None or x <= 0:
            continue
        change = y / x - 1
        if abs(change) <= relative:
            same += 1
            continue
        word = "lower than" if change < 0 else "higher than"
        said.append(
            f"{other}'s {name} is {abs(change) * 100:.1f}% {word} {base}'s "
            f"({value.format(y)} against {value.format(x)})"
        )
    return said, same
