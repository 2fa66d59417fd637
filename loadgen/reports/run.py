"""Human outputs beside summary.json: report.md, report.html, the PNG plots, the console table.

Every percentile is printed with its sample count and CI; one the sample cannot support
prints as "n/a (needs ≥N)" rather than a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.analysis import checked, sessions, slices, stats, steady, timesplit
from loadgen.analysis.records import RunData
from loadgen.capacity import advice
from loadgen.reports.charts import png
from loadgen.reports.charts import run as charts
from loadgen.reports.charts.model import Figure
from loadgen.reports.formatting import fell_behind, ms, sustained
from loadgen.reports.formatting import pct as _pct
from loadgen.reports.formatting import rate as _rate
from loadgen.reports.html import run as html_run
from loadgen.reports.slowest import (
    any_reasoned,
    slowest,
    slowest_cells,
    slowest_columns,
    slowest_requests,
    trace_cell,
)

# report.md drawn without its PNGs (a capacity search's probes, --no-probe-pngs)
UNDRAWN = "Charts: in report.html; `python -m loadgen report DIR` draws them here as PNGs."
SHOWN = (
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT"),
    ("itl_s", "ITL"),
    ("e2e_s", "E2E"),
    ("time_to_first_chunk_s", "first chunk"),
    ("ttf3t_s", "TTF3T"),
    ("answer_ttft_s", "answer TTFT"),
    ("server_queue_s", "server queue"),
    ("server_ttft_s", "server TTFT"),
)


def target_section(name: str, t: dict[str, Any]) -> list[str]:
    lines = [f"## {name}", ""]
    # the server's verdict first: a drowning server is the news, whatever the client saw
    saturated = steady.label(t.get("steady_state"))
    if saturated:
        lines += [f"**{saturated[:1].upper()}{saturated[1:]}.**", ""]
    cut = steady.unfinished(t.get("steady_state"))
    if cut:
        lines += [f"{cut[:1].upper()}{cut[1:]}.", ""]
    if not t["valid"]:
        lines += [f"**INVALID**: {'; '.join(t['invalid_reasons'])}", ""]
    lines += [
        f"| metric (ms{', saturated' if saturated else ''}) "
        "| P50 [95% CI] | P90 | P99 [95% CI] | P99.9 | mean | n |",
        "|---|---|---|---|---|---|---|",
    ]
    reasoned = bool(((t.get("signals") or {}).get("reasoning") or {}).get("requests"))
    for key, label in SHOWN:
        m = t["metrics"].get(key)
        if m is None or (key in SIGNAL_METRICS and not m["count"]):
            continue  # a summary from before the figure, or no server that sent it
        if key == "answer_ttft_s" and not reasoned:
            continue  # TTFT's twin when nothing reasoned
        row = [label] + [_pct(m, p) for p in stats.PERCENTILES] + [ms(m["mean"]), str(m["count"])]
        lines.append("| " + " | ".join(row) + " |")
    req, thr, good = t["requests"], t["throughput"], t["goodput"]
    slo = ", ".join(f"{k.upper()} ≤ {v * 1e3:.0f} ms" for k, v in good["slo"].items())
    lines += [
        "",
        f"- requests: {req['ok']} ok, {req['failed']} failed, "
        f"{req.get('unfinished', 0)} unfinished; excluded: "
        + (", ".join(f"{n} {k}" for k, n in req["excluded"].items()) or "none"),
        f"- throughput: {_rate(sustained(t))} req/s"
        + (" completed inside the window (saturated)" if fell_behind(t) else "")
        + f", {_rate(thr['output_tokens_per_s'])} output tok/s over {thr['active_s']:.1f} s active",
        f"- goodput ({slo}): {_rate(good['requests_per_s'])} req/s, "
        f"fraction {_rate(good['fraction'])}",
    ]
    for said in (slices.sentence(name, t), slices.slo_sentence(name, t)):
        if said:
            lines.append(f"- {said}")
    if req["errors"]:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(req["errors"].items()))
        lines.append(f"- errors: {errors}")
    if req.get("tpot_not_measured"):  # absent from summaries written before it was counted
        lines.append(
            f"- TPOT not measured for {req['tpot_not_measured']} ok requests: fewer than two "
            "content events (a one-token answer, or a server that sent the answer in one event)"
        )
    stream = t.get("stream")
    if stream:
        verdict = f"**{stream['verdict']}**" if stream["buffered"] else stream["verdict"]
        lines.append(f"- stream: {verdict}")
    client = t["client"]
    lines.append(
        f"- client: send lag P99 {ms(client['send_lag_s']['p99'])} ms, "
        f"event-loop lag P99 {ms(client['loop_lag_s']['p99'])} ms"
        + ("" if client.get("cpu") is None else f", CPU {client['cpu']:.0%} of a core")
    )
    if t.get("mbu") is not None:
        lines.append(f"- MBU: {t['mbu']:.2f}")
    gpu = t.get("gpu")
    if gpu:
        lines.append(
            f"- GPU: peak memory {gpu['peak_memory_mib']} MiB, "
            f"mean power (all GPUs) {_rate(gpu['mean_power_w_total'], ' W')}"
        )
    lines += signal_lines(t.get("signals"))
    vb = t["compat"]["vllm_bench"]
    lines.append(
        "- as vLLM bench serve defines them (from actual send): "
        f"TTFT P50 {ms(vb['ttft_s']['p50'])} ms, TPOT P50 {ms(vb['tpot_s']['p50'])} ms, "
        f"ITL P50 {ms(vb['itl_s']['p50'])} ms"
    )
    return [*lines, "", *checked.section(name, t), *timesplit.markdown(name, t)]


SIGNAL_METRICS = ("answer_ttft_s", "server_queue_s", "server_ttft_s")


def signal_lines(signals: dict[str, Any] | None) -> list[str]:
    """Reasoning share, cache-hit fraction and stalls, when the requests carried them."""
    if not signals:
        return []
    lines = []
    reasoning, cache, stalls = signals["reasoning"], signals["cache"], signals["stalls"]
    if reasoning["requests"]:
        lines.append(
            f"- reasoning: {reasoning['share'] * 100:.1f}% of output tokens over "
            f"{reasoning['requests']} requests; reasoning time P50 "
            f"{ms(reasoning['reasoning_s']['p50'])} ms"
        )
    if cache["requests"]:
        lines.append(
            f"- prefix cache: {cache['hit_fraction'] * 100:.1f}% of prompt tokens cached; "
            f"{cache['requests_with_hits']} of {cache['requests']} requests hit"
        )
    if stalls["streams"]:
        lines.append(
            f"- stalls: {stalls['stalls']} in {stalls['streams_with_stalls']} of "
            f"{stalls['streams']} streams; largest gap P99 {ms(stalls['max_itl_s']['p99'])} ms, "
            f"max {ms(stalls['max_itl_s']['p999'])} ms (P99.9)"
        )
    return lines


def markdown(
    summary: dict[str, Any],
    meta: dict[str, Any],
    plots: Sequence[str],
    comparison: str | None = None,
    slowest: Sequence[str] = (),
) -> str:
    lines = ["# loadgen report", ""]
    if meta.get("command"):
        lines += ["```", meta["command"], "```", ""]
    if summary.get("virtual"):
        lines += [predicted(summary["virtual"]), ""]
    if meta.get("replay"):
        lines += _replay_lines(meta["replay"])
    if summary.get("proxy_cost"):  # the run's question, answered before the targets' details
        lines += [f"**{_capital(summary['proxy_cost']['sentence'])}.**", ""]
    if summary.get("interrupted"):
        by = meta.get("interrupted_by", "a signal")
        lines += [f"**Interrupted** by {by}: partial results, the last block cut short.", ""]
    for name, t in summary["targets"].items():
        lines += target_section(name, t)
    found = sessions_section(summary, meta.get("trace_url"))
    if found:
        lines += ["## Sessions", "", *found]
    if summary.get("sweep"):
        lines += sweep_section(summary["sweep"])
        lines += [f"{line}." for line in knees(summary)] + ([""] if knees(summary) else [])
    if comparison:
        lines += [comparison]
    lines += slowest
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def predicted(twin: dict[str, Any]) -> str:
    """The sentence a virtual run opens with: its figures were never measured (each
    target's twin named, when it compared several)."""
    twins = list(twin.get("by_target", {"": twin}).values())
    presets = "; ".join(_twin_named(t) for t in twins)
    trust = "; ".join(
        f"{t['preset']}: {advice.basis(t)}" if len(twins) > 1 else advice.basis(t) for t in twins
    )
    return (
        f"**Predicted**: these figures come from the simulator's virtual clock ({presets}), "
        f"not from a server; no request was sent. How far to trust them: {trust}."
    )


def _twin_named(twin: dict[str, Any]) -> str:
    args = f" with {twin['args']}" if twin.get("args") else ""
    replicas = twin["replicas"]
    on = f"{replicas} replicas of " if replicas > 1 else ""
    return f"{on}preset {twin['preset']}{args}"


def knees(summary: dict[str, Any]) -> list[str]:
    """Each target's knee, where the sweep crossed one: "x saturates between 2 and 3 req/s"."""
    sweep = summary.get("sweep") or {}
    unit = {"rate": "req/s", "concurrency": "streams"}.get(sweep.get("kind") or "", "")
    return [
        steady.knee_sentence(name, found, unit, bool(summary.get("virtual")))
        for name, found in (sweep.get("knee") or {}).items()
    ]


def sweep_section(sweep: dict[str, Any]) -> list[str]:
    """The sweep's table: one row per level and target."""
    lines = [
        f"## Sweep ({sweep['kind']})",
        "",
        "| level | target | req/s | TTFT P50 | TTFT P99 | TPOT P50 | valid | steady |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point in sweep["points"]:
        for name, t in point["targets"].items():
            m = t["metrics"]
            lines.append(
                f"| {point['level']:g} | {name} | {_rate(t['throughput']['requests_per_s'])}"
                f" | {ms(m['ttft_s']['p50'])} | {ms(m['ttft_s']['p99'])}"
                f" | {ms(m['tpot_s']['p50'])} | {t['valid']} | {_steady_cell(t)} |"
            )
    return [*lines, ""]


def _replay_lines(replay: dict[str, Any]) -> list[str]:
    """What was replayed: the file, the window, the speed, what was left out."""
    w = replay["window"]
    lines = [
        f"Replay of `{replay['file']}` ({replay['format']}, sha256 {replay['sha256'][:12]}…): "
        f"{w['records']} records, lines {w['first_line']}–{w['last_line']}, from "
        f"{w['start_s']:g} s into the trace, at {replay['speed']:g}x "
        f"({w['span_s']:.1f} s of sending).",
    ]
    skipped, unreplayable = replay["bad_rows"]["skipped"], replay["unreplayable"]
    if skipped:
        first = replay["bad_rows"]["first"][0]
        lines.append(
            f"**{skipped} bad rows skipped** (--skip-bad-rows), the first at line "
            f"{first['line']}: {first['reason']}."
        )
    if unreplayable:
        lines.append(
            f"{unreplayable} requests in the file had no lengths (failed) and were left out."
        )
    return [*lines, ""]


def _steady_cell(t: dict[str, Any]) -> str:
    """yes, SATURATED, or — for a summary from before steady state was judged."""
    state = t.get("steady_state")
    return "—" if state is None else ("yes" if state["steady"] else "SATURATED")


def _capital(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def console_table(summary: dict[str, Any]) -> str:
    header = (
        "target",
        "ok",
        "failed",
        "req/s",
        "TTFT P50",
        "TTFT P99",
        "TPOT P50",
        "TPOT P99",
        "E2E P50",
        "goodput",
        "valid",
        "steady",
    )
    rows = [header]
    answer = [summary["proxy_cost"]["sentence"]] if summary.get("proxy_cost") else []
    for name, t in summary["targets"].items():
        m = t["metrics"]
        rows.append(
            (
                name,
                str(t["requests"]["ok"]),
                str(t["requests"]["failed"]),
                _rate(sustained(t)),
                ms(m["ttft_s"]["p50"]),
                ms(m["ttft_s"]["p99"]),
                ms(m["tpot_s"]["p50"]),
                ms(m["tpot_s"]["p99"]),
                ms(m["e2e_s"]["p50"]),
                _rate(t["goodput"]["fraction"]),
                "yes" if t["valid"] else "NO",
                _steady_cell(t),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    text.insert(1, "  ".join("-" * w for w in widths))
    text = answer + text  # the question the run asked, answered before its table
    text.append("(latencies in ms)")
    if summary.get("virtual"):
        text.append(predicted(summary["virtual"]).replace("**", ""))
    text += [f"{line}." for line in knees(summary)]
    for name, t in summary["targets"].items():
        saturated = steady.label(t.get("steady_state"))
        if saturated:
            text.append(f"{name}: {saturated.replace('saturated', 'SATURATED', 1)}")
        cut = steady.unfinished(t.get("steady_state"))
        if cut:
            text.append(f"{name}: {cut}")
        for reason in t["invalid_reasons"]:
            text.append(f"{name}: INVALID: {reason}")
        stream = t.get("stream")
        if stream and stream["buffered"]:
            text.append(f"{name}: {stream['verdict']}")
        text += checked.console(name, t)
    return "\n".join(text)


def sessions_section(summary: dict[str, Any], template: str | None) -> list[str]:
    """Each target's sessions (a replayed agents' capture, --turns conversations) in a
    sentence, its TTFT by turn and its slowest sessions with the trace of each one's longest
    call; nothing when no target's requests belonged to sessions."""
    lines = []
    for name, t in summary["targets"].items():
        block = t.get("sessions")
        if not block:
            continue
        lines += [f"{name}: {sessions.sentence(block)}.", ""]
        if block["ttft_by_turn"]:
            lines += ["| turn | calls | TTFT P50 (ms) | TTFT P90 (ms) |", "|---|---|---|---|"]
            lines += [
                f"| {x['turn']} | {x['calls']} | {ms(x['p50_s'])} | {ms(x['p90_s'])} |"
                for x in block["ttft_by_turn"]
            ]
            lines.append("")
        lines += [
            f"{name}, the slowest sessions:",
            "",
            "| session | span (s) | calls | model share | its longest call's trace id |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{x['session']}` | {x['span_s']:.2f} | {x['calls']} | {x['model_share']:.0%} "
            f"| {trace_cell(template, x['trace_id'])} |"
            for x in block["slowest"]
        ]
        lines.append("")
    return lines


def page(
    data: RunData, summary: dict[str, Any], figures: Sequence[Figure], comparison: str | None
) -> str:
    """report.html: report.md's sections and sentences, the same figures as SVG."""
    sections = [line for n, t in summary["targets"].items() for line in target_section(n, t)]
    text = {"figures": "\n".join(sections)}
    if summary.get("virtual"):
        text["figures"] = predicted(summary["virtual"]) + "\n\n" + text["figures"]
    if summary.get("proxy_cost"):
        answer = _capital(summary["proxy_cost"]["sentence"])
        text["figures"] = f"**{answer}.**\n\n" + text["figures"]
    if data.meta.get("replay"):
        text["replay"] = "\n".join(_replay_lines(data.meta["replay"]))
    found = sessions_section(summary, data.meta.get("trace_url"))
    if found:
        text["sessions"] = "\n".join(found)
    if summary.get("sweep"):
        text["sweep"] = "\n".join(sweep_section(summary["sweep"]))
    if comparison:
        text["comparison"] = comparison
    reasoned = any_reasoned(data)
    ranked = [
        (name, label, [(r, slowest_cells(r, reasoned)) for r in found])
        for name, label, found in slowest(data)
    ]
    return html_run.render(data, summary, figures, text, (slowest_columns(reasoned), ranked))


def write(
    out: Path,
    data: RunData,
    summary: dict[str, Any],
    comparison: str | None = None,
    pngs: bool = True,
) -> Path:
    """report.md (with the comparison section, if any), its plots unless not `pngs` and
    report.html, all from the same figures and sentences, into the run directory."""
    figures = charts.figures(data, summary)
    plots = [f.file for f in figures] if pngs else []
    for figure in figures if pngs else []:
        png.write(figure, out / figure.file)
    text = markdown(summary, data.meta, plots, comparison, slowest_requests(data))
    if figures and not pngs:
        text += f"\n{UNDRAWN}\n"
    path = out / "report.md"
    path.write_text(text)
    (out / "report.html").write_text(page(data, summary, figures, comparison))
    return path
