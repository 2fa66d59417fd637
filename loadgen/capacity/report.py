"""A capacity search's outputs: capacity.json, report.md, report.html, the PNGs, the console lines.

`result` turns the searches into capacity.json's dictionary; everything else renders from
that dictionary alone, so a report can be redrawn from the file. The report closes the way
the seeds' deployment advice does: who sustains how much at these SLOs, which SLO binds
first, and the headroom of the stronger target at the weaker one's capacity.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.capacity.search import METRICS, Search, seconds
from loadgen.charts import capacity as capacity_charts
from loadgen.charts import png
from loadgen.config import RunConfig
from loadgen.html import capacity as html_capacity
from loadgen.slo import LABELS, Slos, percentile_label

STOPPED = {
    "bracket": "every bracket is within 10% (or nothing met at the lowest level tried)",
    "budget": "the budget ran out (brackets still wider than 10% are marked)",
    "interrupted": "interrupted (Ctrl-C or SIGTERM): what was found so far",
}
PLOT = "capacity.png"


def _unit(by: str) -> str:
    return {"rate": "req/s", "speed": "x the trace's speed"}.get(by, "concurrent streams")


def _binding(probe: Mapping[str, Any] | None) -> str | None:
    """What failed first at the lowest failing level: the SLO missed by most, else why."""
    if probe is None:
        return None
    missed = {m: r for m, r in probe["ratios"].items() if r > 1}
    if missed:
        return max(missed, key=missed.__getitem__)
    if not probe["steady"]:
        return "steady_state"
    if not probe["valid"]:
        return "client"
    return "errors"


def result(
    config: RunConfig,
    by: str,
    requests: int,
    budget_s: float,
    elapsed_s: float,
    stopped: str,
    targets: Mapping[str, tuple[Search, list[dict[str, Any]]]],
) -> dict[str, Any]:
    """capacity.json."""
    slos = config.summary.slos
    out: dict[str, Any] = {}
    for name, (search, probes) in targets.items():
        judged = [p for p in probes if not p["interrupted"]]
        at = {p["level"]: p for p in judged}
        knee = at.get(search.passing) if search.passing is not None else None
        failing = at.get(search.failing) if search.failing is not None else None
        reason = None
        if knee is None and judged:
            lowest = min(judged, key=lambda p: p["level"])
            reason = f"even {lowest['level']:g} {_unit(by)} fails: " + "; ".join(lowest["failures"])
        out[name] = {
            "by": by,
            "capacity": search.passing,
            "bracket": [search.passing, search.failing],
            "converged": search.converged,
            "output_tokens_per_s": knee["output_tokens_per_s"] if knee else None,
            "requests_per_s": knee["requests_per_s"] if knee else None,
            "binding": _binding(failing),
            "reason": reason,
            "probes": sorted(probes, key=lambda p: p["number"]),
        }
    return {
        "version": 1,
        "command": config.command,
        "by": by,
        "slo": {
            m: {"limit_s": v, "percentile": slos.percentile(m)} for m, v in slos.limits.items()
        },
        "probe_requests": requests,
        "warmup_s": config.warmup_s,
        "budget_s": budget_s,
        "gpus": config.summary.gpus,
        "elapsed_s": elapsed_s,
        "stopped": stopped,
        "targets": out,
    }


def _slos(result: Mapping[str, Any]) -> Slos:
    slo = result["slo"]
    return Slos(
        {m: v["limit_s"] for m, v in slo.items()}, {m: v["percentile"] for m, v in slo.items()}
    )


def _level(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _binding_words(name: str, t: Mapping[str, Any], result: Mapping[str, Any]) -> str | None:
    binding = t["binding"]
    if binding is None:
        return None
    at = next(p for p in t["probes"] if p["level"] == t["bracket"][1] and not p["interrupted"])
    where = f"{at['level']:g} {_unit(result['by'])}"
    if binding in METRICS:
        pct = result["slo"][binding]["percentile"]
        value = at[METRICS[binding]][pct]
        limit = result["slo"][binding]["limit_s"]
        return (
            f"for {name}, {LABELS[binding]} binds first: {percentile_label(pct)} "
            f"{seconds(value)} at {where}, against {seconds(limit)}"
        )
    if binding == "steady_state":
        return (
            f"for {name}, saturation binds first: at {where} it fell behind the load "
            "before any SLO was missed"
        )
    if binding == "client":
        return (
            f"for {name}, the client could not keep up at {where}: the result is the client's limit"
        )
    return f"for {name}, errors bind first: at {where} more than 1% of requests failed"


def sentence(result: Mapping[str, Any]) -> str:
    """The closing sentence: "At TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90), qwen-72b
    sustains 3.1 req/s (790 output tok/s) and llama-70b 2.6 req/s; at 2.6 req/s qwen-72b
    still has 19% headroom." """
    unit = _unit(result["by"])
    found = sorted(
        ((n, t) for n, t in result["targets"].items() if t["capacity"] is not None),
        key=lambda item: -item[1]["capacity"],
    )
    parts = []
    for i, (name, t) in enumerate(found):
        tokens = t["output_tokens_per_s"]
        text = (
            f"{name} sustains {t['capacity']:g} {unit}"
            if i == 0
            else f"{name} {t['capacity']:g} {unit}"
        )
        if i == 0 and tokens is not None:
            text += f" ({tokens:.0f} output tok/s)"
        parts.append(text)
    said = f"At {_slos(result).describe()}, "
    if parts:
        said += parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    none = [n for n, t in result["targets"].items() if t["capacity"] is None]
    if none:
        said += ("; " if parts else "") + ", ".join(none) + " meets them at no level tried"
    if len(found) >= 2:
        top, low = found[0], found[-1]
        headroom = top[1]["capacity"] / low[1]["capacity"] - 1
        said += f"; at {low[1]['capacity']:g} {unit} {top[0]} still has {headroom:.0%} headroom"
    open_ = [
        n for n, t in result["targets"].items() if not t["converged"] and t["capacity"] is not None
    ]
    if open_:
        said += (
            f" ({', '.join(open_)}: bracket still wider than 10%, the true figure may be higher)"
        )
    return said + "."


def _rows(result: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows = [
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


def console(result: Mapping[str, Any]) -> str:
    rows = _rows(result)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    text.insert(1, "  ".join("-" * w for w in widths))
    text.append(f"stopped: {STOPPED[result['stopped']]}, after {result['elapsed_s']:.0f} s")
    text.append(sentence(result))
    for name, t in result["targets"].items():
        words = _binding_words(name, t, result)
        if words:
            text.append(words[0].upper() + words[1:])
        if t["reason"]:
            text.append(f"{name}: {t['reason']}")
    return "\n".join(text)


def markdown(result: Mapping[str, Any], plots: Sequence[str] = (PLOT,)) -> str:
    slos, by = _slos(result), result["by"]
    judged = ", ".join(sorted({percentile_label(slos.percentile(m)) for m in slos.limits}))
    lines = [
        "# loadgen capacity",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"- SLOs: {slos.describe()}. A level meets them when every one holds at its "
        "percentile, the level is steady (not saturated), the client kept up and at most 1% "
        "of its requests failed.",
        f"- Each probe measured {result['probe_requests']} requests per target after "
        f"{result['warmup_s']:g} s of warmup: the fewest that bound {judged} from both sides "
        "at 95% (or as asked with --requests; never fewer than the percentile needs).",
        f"- Search by {by}: bracket (doubling or halving), then bisect; targets take turns "
        f"probe by probe. Stopped: {STOPPED[result['stopped']]}, after "
        f"{result['elapsed_s']:.0f} s (budget {result['budget_s']:.0f} s).",
        "",
    ]
    rows = _rows(result)
    lines += ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    lines.append("")
    for name, t in result["targets"].items():
        header = ["#", by, "verdict"] + [
            f"{LABELS[m]} {percentile_label(slos.percentile(m))} (ms)" for m in slos.limits
        ]
        header += ["req/s", "output tok/s", "run directory"]
        lines += [f"## {name}", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        for p in t["probes"]:
            verdict = (
                "interrupted"
                if p["interrupted"]
                else ("meets" if p["meets"] else "fails: " + "; ".join(p["failures"]))
            )
            cells = [str(p["number"]), f"{p['level']:g}", verdict]
            for m in slos.limits:
                value = p[METRICS[m]][slos.percentile(m)]
                cells.append("—" if value is None else f"{value * 1e3:.1f}")
            rate, tokens = p["requests_per_s"], p["output_tokens_per_s"]
            cells += [
                "—" if rate is None else f"{rate:.2f}",
                "—" if tokens is None else f"{tokens:.0f}",
                f"[{p['run_dir']}]({p['run_dir']}/report.md)",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        if t["reason"]:
            lines += ["", f"No capacity: {t['reason']}."]
        lines.append("")
    lines += [*(f"![{p}]({p})" for p in plots), "", "## Conclusion", "", sentence(result)]
    for name, t in result["targets"].items():
        words = _binding_words(name, t, result)
        if words:
            lines += ["", words[0].upper() + words[1:] + "."]
    return "\n".join(lines) + "\n"


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
    """The closing sentence, then per target what binds first or why it has no capacity."""
    lines = [sentence(result)]
    for name, t in result["targets"].items():
        words = _binding_words(name, t, result)
        if words:
            lines.append(words[0].upper() + words[1:] + ".")
        if t["reason"]:
            lines.append(f"No capacity for {name}: {t['reason']}.")
    return lines
