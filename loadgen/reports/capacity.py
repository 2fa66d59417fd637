"""A capacity search's outputs: capacity.json, report.md, report.html, the PNGs, the console lines.

`result` turns the searches into capacity.json's dictionary; everything else renders from
that dictionary alone, so a report can be redrawn from the file. The report closes the way
the seeds' deployment advice does (advice.py): who sustains how much at these SLOs, what
breaks first above it, and the headroom of the stronger target at the weaker one's capacity.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.analysis.slo import LABELS, METRICS, Slos, named, percentile_label
from loadgen.capacity.advice import sentence, slos_of
from loadgen.capacity.axis import AXES, Axis
from loadgen.capacity.search import VIRTUAL_REQUESTS, Search, crossing
from loadgen.capacity.verdict import FAILS, UNDECIDED
from loadgen.reports.charts import capacity as capacity_charts
from loadgen.reports.charts import png
from loadgen.reports.html import capacity as html_capacity
from loadgen.runs.config import RunConfig

STOPPED = {
    "bracket": "every bracket is narrow enough (or nothing met at the lowest level tried)",
    "budget": "the budget ran out (brackets still too wide are marked open)",
    "interrupted": "interrupted (Ctrl-C or SIGTERM): what was found so far",
}
PLOT = "capacity.png"


def _unit(by: str) -> str:
    return AXES[by].unit


def _binding(probe: Mapping[str, Any] | None) -> str | None:
    """What failed first at the lowest failing level: the SLO missed by most, else why."""
    if probe is None:
        return None
    missed = {m: r for m, r in probe["ratios"].items() if r > 1}
    if missed:
        return max(missed, key=missed.__getitem__)
    if not probe["steady"]:
        return "steady_state"
    return "errors"


def binding_slo(probe: Mapping[str, Any] | None, slo: Mapping[str, Any]) -> dict[str, Any] | None:
    """The SLO that binds at the lowest failing level, with its value there; None when
    saturation or errors, not an SLO, end the range (or nothing failed)."""
    metric = _binding(probe)
    if probe is None or metric is None or metric not in slo:
        return None
    pct = slo[metric]["percentile"]
    return {
        "metric": metric,
        "percentile": pct,
        "limit_s": slo[metric]["limit_s"],
        "value_s": probe[METRICS[metric]][pct],
        "level": probe["level"],
    }


def _decided(probes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The probes a bracket stands on: not interrupted, not extended, not repeats."""
    return [p for p in probes if not (p["interrupted"] or p["extended"] or p["repeat"] is not None)]


def upgrade(result: dict[str, Any]) -> dict[str, Any]:
    """capacity.json from before `binding_slo`: each target's filled in from its probes."""
    for t in result["targets"].values():
        if "binding_slo" not in t:
            failing = [p for p in _decided(t["probes"]) if p["level"] == t["bracket"][1]]
            t["binding_slo"] = binding_slo(failing[0] if failing else None, result["slo"])
    return result


def result(
    config: RunConfig,
    axis: Axis,
    requests: int,
    capacity: Any,  # command.CapacityConfig
    settings: Mapping[str, Any],  # how probes were run: the command's defaults
    elapsed_s: float,
    stopped: str,
    targets: Mapping[str, tuple[Search, list[dict[str, Any]]]],
    predicted: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """capacity.json; `predicted`: per virtual: target, the twin its probes ran on (a run's
    summary.json `virtual`)."""
    predicted = predicted or {}
    slos = config.summary.slos
    slo = {m: {"limit_s": v, "percentile": slos.percentile(m)} for m, v in slos.limits.items()}
    out: dict[str, Any] = {}
    for name, (search, probes) in targets.items():
        decided = _decided(probes)
        at = {p["level"]: p for p in decided}
        knee = at.get(search.passing) if search.passing is not None else None
        failing = at.get(search.failing) if search.failing is not None else None
        reason = None
        if knee is None and decided:
            lowest = min(decided, key=lambda p: p["level"])
            reason = f"even {axis.amount(lowest['level'])} does not meet: " + "; ".join(
                lowest["failures"] or lowest["unsure"]
            )
        out[name] = {
            "by": axis.name,
            "capacity": search.passing,
            "bracket": [search.passing, search.failing],
            "undecided": search.undecided,
            "converged": search.converged,
            "crossing": crossing(knee, failing) if knee and failing else None,
            "output_tokens_per_s": knee["output_tokens_per_s"] if knee else None,
            "requests_per_s": knee["requests_per_s"] if knee else None,
            "sessions_per_min": knee.get("sessions_per_min") if knee else None,
            "binding": _binding(failing),
            "binding_slo": binding_slo(failing, slo),
            "reason": reason,
            "repeat": _repeats(probes, search) if capacity.repeat else None,
            "probes": sorted(probes, key=lambda p: p["number"]),
            "predicted": predicted.get(name),
        }
        for block in ("cost", "energy"):  # at the capacity: absent without a price or power
            if knee is not None and block in knee:
                out[name][block] = knee[block]
    return {
        "version": 2,
        "command": config.command,
        "by": axis.name,
        "slo": slo,
        "probe_requests": requests,
        "warmup_s": config.warmup_s,
        **settings,
        "seed": config.summary.seed,
        "repeat": capacity.repeat,
        "budget_s": capacity.budget_s,
        "gpus": config.summary.gpus,
        "elapsed_s": elapsed_s,
        "stopped": stopped,
        "predicted": bool(predicted),
        "targets": out,
    }


def _repeats(probes: list[dict[str, Any]], search: Search) -> dict[str, Any]:
    """The capacity figure again from each repeat of the bracket's ends (new seeds): where
    the binding SLO crosses its limit between them, and whether each end kept its verdict."""
    runs = []
    numbers = sorted({p["repeat"] for p in probes if p["repeat"] is not None})
    for number in numbers:
        ends = {p["level"]: p for p in probes if p["repeat"] == number}
        low, high = ends.get(search.passing), ends.get(search.failing)
        runs.append(
            {
                "repeat": number,
                "outcomes": {f"{lvl:g}": p["outcome"] for lvl, p in ends.items()},
                "agrees": (low is None or low["outcome"] == "meets")
                and (high is None or high["outcome"] == "fails"),
                "crossing": crossing(low, high) if low and high else None,
            }
        )
    found = [r["crossing"] for r in runs if r["crossing"] is not None]
    return {
        "runs": runs,
        "crossing_spread": [min(found), max(found)] if found else None,
        "agree": sum(r["agrees"] for r in runs),
    }


def _level(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _rows(result: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [
        (
            "target",
            f"capacity ({_unit(result['by'])})",
            "bracket",
            "output tok/s",
            "binds first",
            "probes",
        )
    ]
    for name, t in result["targets"].items():
        low, high = t["bracket"]
        tokens = t["output_tokens_per_s"]
        rows.append(
            (
                name,
                _level(t["capacity"]),
                f"[{_level(low)}, {_level(high)}]" + ("" if t["converged"] else " open"),
                "—" if tokens is None else f"{tokens:.0f}",
                {"steady_state": "saturation"}.get(
                    t["binding"], LABELS.get(t["binding"], t["binding"] or "—")
                ),
                str(len(t["probes"])),
            )
        )
    return rows


PREDICTED = (
    "Predicted: every probe ran on the simulator's virtual clock (virtual: targets), not on "
    "a server; no request was sent."
)


def console(result: Mapping[str, Any]) -> str:
    rows = _rows(result)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    text.insert(1, "  ".join("-" * w for w in widths))
    if result.get("predicted"):
        text.insert(0, PREDICTED)
    text.append(f"stopped: {STOPPED[result['stopped']]}, after {result['elapsed_s']:.0f} s")
    text.append(sentence(result))
    for name, t in result["targets"].items():
        if t["reason"]:
            text.append(f"{name}: {t['reason']}")
        if t["repeat"]:
            text.append(f"{name}: {_repeat_words(t, result['by'])}")
    return "\n".join(text)


def markdown(result: Mapping[str, Any], plots: Sequence[str] = (PLOT,)) -> str:
    slos, by = slos_of(result), result["by"]
    judged = ", ".join(sorted({percentile_label(slos.percentile(m)) for m in slos.limits}))
    lines = [
        "# loadgen capacity",
        "",
        "```",
        result["command"],
        "```",
        "",
        *([f"**{PREDICTED.replace(':', '**:', 1)}", ""] if result.get("predicted") else []),
        f"- SLOs: {slos.describe()}. A probe *meets* them when every SLO's 95% interval "
        "lies under its limit and the level is steady; it *fails* when any interval lies "
        "above its limit, the level saturated or more than 1% of its requests failed; "
        "otherwise (an interval straddles its limit, the warm-up never settled, TTFT still "
        "rose) it is *undecided* and is run again with twice the "
        f"window, up to {result['max_extensions']} times. The bracket uses decided probes "
        "only. A client that fell behind only lengthens latencies: its probe's intervals "
        "have their lower ends lowered by its lag.",
        f"- Each probe warmed up for at least {result['warmup_s']:g} s and then until the "
        f"in-flight count stopped growing (at most {result['settle_max_s']:g} s), then "
        f"measured at least {result['window_e2es']:g} typical request durations and "
        f"{result['probe_requests']} requests per target ({_how_many(result, judged)}), "
        "each with its own arrival seed.",
        f"- Search by {by}: bracket (doubling or halving), then bisect to within "
        f"{result['precision']:.0%}; targets take turns level by level. Stopped: "
        f"{STOPPED[result['stopped']]}, after {result['elapsed_s']:.0f} s "
        f"(budget {result['budget_s']:.0f} s).",
        "",
    ]
    rows = _rows(result)
    lines += ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    lines.append("")
    for name, t in result["targets"].items():
        lines += [f"## {name}", "", *_probe_table(t, slos, by), ""]
        if t["undecided"]:
            levels = ", ".join(f"{lvl:g}" for lvl in t["undecided"])
            lines += [f"Still undecided after every extension: {levels} {_unit(by)}.", ""]
        if t["repeat"]:
            lines += [_repeat_words(t, by), ""]
        if t["reason"]:
            lines += [f"No capacity: {t['reason']}.", ""]
    lines += [*(f"![{p}]({p})" for p in plots), "", "## Conclusion", "", sentence(result)]
    return "\n".join(lines) + "\n"


def _how_many(result: Mapping[str, Any], judged: str) -> str:
    """Why a probe measures that many requests, in words."""
    if result["by"] == "speed":
        return "the trace window's, or as asked with --requests"
    fewest = f"the fewest that bound {judged} from both sides at 95%"
    if result.get("predicted"):
        fewest = f"{VIRTUAL_REQUESTS} times {fewest}, cheap on the virtual clock"
    return fewest + ", or as asked with --requests"


def _verdict_cell(p: Mapping[str, Any]) -> str:
    if p["outcome"] == "fails":
        text = "fails: " + "; ".join(p["failures"])
    elif p["outcome"] == "undecided":
        text = "undecided: " + "; ".join(p["unsure"])
    else:
        text = p["outcome"]
    if p["extended"]:
        text += " — extended"
    if p["extends"] is not None:
        text = f"(extends #{p['extends']}) " + text
    if p["repeat"] is not None:
        text = f"(repeat {p['repeat']}) " + text
    return text


def _interval_cell(p: Mapping[str, Any], metric: str) -> str:
    """ "46.1 [43.0, 49.2] under": the percentile, its 95% interval, where it lies (ms)."""
    found = p.get("intervals", {}).get(metric)
    if not found:
        return "—"
    low, high = found["ci95"] or (None, None)
    ms = lambda v: "—" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    return f"{ms(found['value'])} [{ms(low)}, {ms(high)}] {found['side']}"


def _probe_table(t: Mapping[str, Any], slos: Slos, by: str) -> list[str]:
    header = ["#", by, "verdict"] + [
        f"{named(m, slos.percentile(m))} [95% CI] vs {slos.limits[m] * 1e3:g} ms"
        for m in slos.limits
    ]
    header += ["warm-up s", "window s", "requests", "seed", "req/s", "run directory"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for p in t["probes"]:
        verdict = "interrupted" if p["interrupted"] else _verdict_cell(p)
        cells = [str(p["number"]), f"{p['level']:g}", verdict]
        cells += [_interval_cell(p, m) for m in slos.limits]
        rate, warmup = p["requests_per_s"], p["warmup_s"]
        cells += [
            "—" if warmup is None else f"{warmup:.1f}" + ("" if p["settled"] else " (cap)"),
            f"{p['window_s']:.1f}",
            str(p["requests"]),
            str(p["seed"]),
            "—" if rate is None else f"{rate:.2f}",
            f"[{p['run_dir']}]({p['run_dir']}/report.md)",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _repeat_words(t: Mapping[str, Any], by: str) -> str:
    rep = t["repeat"]
    runs = len(rep["runs"])
    text = (
        f"Repeated the bracket's ends {runs} times with new seeds: {rep['agree']} of {runs} "
        "kept both verdicts"
    )
    if t["crossing"] is not None:
        text += f"; the SLO crossed its limit at {t['crossing']:.3g} {_unit(by)} in the search"
    if rep["crossing_spread"]:
        low, high = rep["crossing_spread"]
        text += f" and between {low:.3g} and {high:.3g} in the repeats"
    return text + "."


def write(out: Path, result: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(result, indent=2) + "\n")
    figures = capacity_charts.figures(result)
    for figure in figures:
        png.write(figure, out / figure.file)
    text = markdown(result, [f.file for f in figures])
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(
        html_capacity.render(result, figures, conclusion(result), text)
    )


def conclusion(result: Mapping[str, Any]) -> list[str]:
    """The closing sentence (after what predicted it, for virtual: targets), then per target
    why it has no capacity."""
    lines = [*([PREDICTED] if result.get("predicted") else []), sentence(result)]
    for name, t in result["targets"].items():
        if t["reason"]:
            lines.append(f"No capacity for {name}: {t['reason']}.")
    return lines


def announce(
    number: int,
    name: str,
    axis: Axis,
    level: float,
    requests: int,
    extends: int | None,
    repeat: int | None,
) -> None:
    """A probe's first console line: what it runs, and why (an extension, a repeat)."""
    why = ""
    if extends is not None:
        why = f"; extends undecided probe {extends}"
    elif repeat is not None:
        why = f"; repeat {repeat} with a new seed"
    print(
        f"capacity: probe {number}: {name} at {level:g} {axis.short_unit} (at least {requests} "
        f"requests{why})",
        file=sys.stderr,
        flush=True,
    )


def judged(probe: Mapping[str, Any]) -> None:
    """A probe's second console line: its verdict, why, and what it measured."""
    figures = ", ".join(f"{LABELS[m]} {r:.0%} of its limit" for m, r in probe["ratios"].items())
    outcome = probe["outcome"]
    if outcome == FAILS:
        outcome += ": " + "; ".join(probe["failures"])
    elif outcome == UNDECIDED:
        outcome += ": " + "; ".join(probe["unsure"])
    warmup = probe["warmup_s"]
    print(
        f"capacity:   {outcome} ({figures}; warm-up {warmup or 0:.0f} s, window "
        f"{probe['window_s']:.0f} s, {probe['requests']} requests)",
        file=sys.stderr,
        flush=True,
    )
