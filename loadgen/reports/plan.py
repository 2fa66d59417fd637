"""A plan's outputs: plan.json, plan.md, plan.html, plan.png and the console table.

`result` gathers the candidates into plan.json's dictionary (the command ranks it and adds
the sentence); everything else renders from that dictionary alone.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.reports.charts import plan as plan_charts
from loadgen.reports.charts import png
from loadgen.reports.html import plan as html_plan
from loadgen.runs.config import RunConfig

PREDICTED = (
    "Predicted: every candidate was sized by capacity searches on the simulator's virtual "
    "clock; no request was sent."
)
STATUS = {
    "ranked": "meets the SLOs",
    "does_not_fit": "does not fit",
    "cannot_meet": "cannot meet the SLOs",
    "pruned": "cannot win (not run)",
    "over_bound": "needs more replicas than the bound",
    "searched": "not sized",
}


def result(
    config: RunConfig,
    headroom: float,
    traffic: Any,  # bounds.Traffic
    candidates: list[dict[str, Any]],
    elapsed_s: float,
) -> dict[str, Any]:
    slos = config.summary.slos
    return {
        "version": 1,
        "command": config.command,
        "predicted": True,
        "by": "speed" if config.replay is not None else "rate",
        "slo": {
            m: {"limit_s": v, "percentile": slos.percentile(m)} for m, v in slos.limits.items()
        },
        "traffic": {
            "requests_per_s": traffic.requests_per_s,
            "output_tokens_per_s": traffic.output_tokens_per_s,
            "mean_input_tokens": traffic.mean_input_tokens,
            "mean_output_tokens": traffic.mean_output_tokens,
            "replay": config.replay.file if config.replay is not None else None,
        },
        "headroom": headroom,
        "seed": config.summary.seed,
        "elapsed_s": elapsed_s,
        "candidates": candidates,
    }


def _money(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def _rows(result: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [
        (
            "#",
            "candidate",
            "GPUs",
            "replicas (1x)",
            "holds",
            "$/h [range]",
            "$/Mtok out",
            "J/tok out",
            "binds",
            "rests on",
            "status",
        )
    ]
    order = {name: i for i, name in enumerate(result["ranking"])}
    entries = sorted(
        result["candidates"], key=lambda e: (order.get(e["name"], len(order)), e["name"])
    )
    for e in entries:
        ranked = e["status"] == "ranked"
        rank = str(e["rank"]) if ranked else "—"
        if ranked and e["tied_with"]:
            rank += " ≈"
        span = e.get("usd_per_hour_range")
        cost = f"{_money(e.get('usd_per_hour'))} [{span[0]:,.0f}–{span[1]:,.0f}]" if span else "—"
        joules = e.get("joules_per_output_token")
        rows.append(
            (
                rank,
                e["name"],
                f"{e['gpus']}×{e['gpu'].removeprefix('NVIDIA ')}",
                f"{e.get('replicas') or '—'} ({e.get('replicas_1x') or '—'})",
                f"{e['share']:.2f}x" if ranked else "—",
                cost,
                _money(e.get("usd_per_mtok_output")),
                "—" if joules is None else f"{joules:.2f}",
                (e.get("binding") or "—").replace("steady_state", "saturation") if ranked else "—",
                e["basis"]["kind"] if e.get("basis") else "—",
                STATUS[e["status"]],
            )
        )
    return rows


def console(result: Mapping[str, Any]) -> str:
    rows = _rows(result)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    text.insert(1, "  ".join("-" * w for w in widths))
    text.insert(0, PREDICTED)
    text += _notes(result)
    text.append(result["sentence"])
    return "\n".join(text)


def _notes(result: Mapping[str, Any]) -> list[str]:
    """Why each candidate left out was left out, and which cannot be told apart."""
    lines = [
        f"{e['name']}: {STATUS[e['status']]}: {e['reason']}"
        for e in result["candidates"]
        if e["status"] != "ranked" and e.get("reason")
    ]
    by_name = {e["name"]: e for e in result["candidates"]}
    for name in result["ranking"]:
        tied = by_name[name]["tied_with"]
        if tied:
            lines.append(
                f"{name}: cannot be told apart from {', '.join(tied)} (cost ranges overlap)"
            )
    return lines


def markdown(result: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    traffic = result["traffic"]
    rows = _rows(result)
    lines = [
        "# loadgen plan",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"**{PREDICTED.replace(':', '**:', 1)}",
        "",
        f"- Traffic: {traffic['requests_per_s']:.3g} req/s, {traffic['output_tokens_per_s']:.4g} "
        f"output tok/s (mean {traffic['mean_input_tokens']:.0f} in / "
        f"{traffic['mean_output_tokens']:.0f} out tokens); headroom asked: "
        f"{result['headroom']:.0%}.",
        "- Cost is whole: the replicas' GPUs at their price per hour, over the output tokens "
        "they serve at their capacity. The range is the replicas the candidate would need if "
        "its capacity were as far off as its basis allows; ≈ marks a candidate whose range "
        "overlaps another's: the plan cannot tell them apart.",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|---" * len(rows[0]) + "|",
        *("| " + " | ".join(r) + " |" for r in rows[1:]),
        "",
        *(f"- {line}" for line in _notes(result)),
        "",
        "## What each rests on, and its searches",
        "",
    ]
    for e in result["candidates"]:
        if not e.get("searches"):
            continue
        lines += [f"### {e['name']}", "", f"Rests on {e['basis']['said']}.", ""]
        unit = "x" if result["by"] == "speed" else " req/s"
        for s in e["searches"]:
            start = s["argv"][s["argv"].index("--start") + 1] + unit
            if s.get("kind") == "check":  # one level: whether it holds, nothing more
                verb = "holds" if s["share"] is not None else "falls short of"
                share = f"{verb} {start} (checked at that level alone)"
            elif s["share"] is None:  # a search's floor is its start: it failed there
                share = f"falls short of {start}"
            else:
                share = f"{s['share']:.3g}x"
            link = f"[search]({_relative(s['dir'])}/report.md)"
            count = "1 replica" if s["replicas"] == 1 else f"{s['replicas']} replicas"
            lines.append(f"- {count}: {share}, {link}: `{shlex.join(s['argv'])}`")
        lines.append("")
    lines += [*(f"![{p}]({p})" for p in plots), "", "## Conclusion", "", result["sentence"]]
    return "\n".join(lines) + "\n"


def _relative(path: str) -> str:
    """A candidate's search directory, relative to the plan's (where plan.md lies)."""
    parts = Path(path).parts
    return str(Path(*parts[parts.index("candidates") :])) if "candidates" in parts else path


def write(out: Path, result: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(result, indent=2) + "\n")
    figure = plan_charts.cost_headroom(result)
    figures = [figure] if figure is not None else []
    for f in figures:
        png.write(f, out / f.file)
    text = markdown(result, [f.file for f in figures])
    (out / "plan.md").write_text(text)
    (out / "plan.html").write_text(html_plan.render(result, figures, text))
