"""Human outputs beside summary.json: report.md, PNG plots, the console table.

Every percentile is printed with its sample count and CI; one the sample cannot support
prints as "n/a (needs ≥N)" rather than a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first

from loadgen import slices, slices_plot, stats, steady, timesplit
from loadgen.records import Record, RunData

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


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.1f}"


def _pct(block: dict[str, Any], key: str) -> str:
    value = block.get(key)
    if value is None:
        need = stats.min_samples(stats.PERCENTILES[key])
        return f"n/a (needs ≥{need})" if block.get("count") else "—"
    ci = (block.get("ci95") or {}).get(key)
    if not ci:
        return ms(value)
    low, high = ("…" if bound is None else ms(bound) for bound in ci)  # … a side left unbounded
    return f"{ms(value)} [{low}–{high}]"


def _rate(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.2f}{unit}"


def target_section(name: str, t: dict[str, Any]) -> list[str]:
    lines = [f"## {name}", ""]
    if not t["valid"]:
        lines += [f"**INVALID**: {'; '.join(t['invalid_reasons'])}", ""]
    saturated = steady.label(t.get("steady_state"))
    if saturated:
        lines += [f"**{saturated[:1].upper()}{saturated[1:]}.**", ""]
    lines += [
        f"| metric (ms{', saturated' if saturated else ''}) "
        "| P50 [95% CI] | P90 | P99 [95% CI] | P99.9 | mean | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in SHOWN:
        m = t["metrics"].get(key)
        if m is None or (key in SIGNAL_METRICS and not m["count"]):
            continue  # a summary from before the figure, or no server that sent it
        row = [label] + [_pct(m, p) for p in stats.PERCENTILES] + [ms(m["mean"]), str(m["count"])]
        lines.append("| " + " | ".join(row) + " |")
    req, thr, good = t["requests"], t["throughput"], t["goodput"]
    slo = ", ".join(f"{k.upper()} ≤ {v * 1e3:.0f} ms" for k, v in good["slo"].items())
    lines += [
        "",
        f"- requests: {req['ok']} ok, {req['failed']} failed; excluded: "
        + (", ".join(f"{n} {k}" for k, n in req["excluded"].items()) or "none"),
        f"- throughput: {_rate(thr['requests_per_s'])} req/s, "
        f"{_rate(thr['output_tokens_per_s'])} output tok/s over {thr['active_s']:.1f} s active",
        f"- goodput ({slo}): {_rate(good['requests_per_s'])} req/s, "
        f"fraction {_rate(good['fraction'])}",
    ]
    worst = slices.sentence(name, t)
    if worst:
        lines.append(f"- {worst}")
    if req["errors"]:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(req["errors"].items()))
        lines.append(f"- errors: {errors}")
    stream = t.get("stream")
    if stream:
        verdict = f"**{stream['verdict']}**" if stream["buffered"] else stream["verdict"]
        lines.append(f"- stream: {verdict}")
    client = t["client"]
    lines.append(
        f"- client: send lag P99 {ms(client['send_lag_s']['p99'])} ms, "
        f"event-loop lag P99 {ms(client['loop_lag_s']['p99'])} ms"
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
    return [*lines, "", *timesplit.markdown(name, t)]


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
    if meta.get("replay"):
        lines += _replay_lines(meta["replay"])
    if summary.get("interrupted"):
        by = meta.get("interrupted_by", "a signal")
        lines += [f"**Interrupted** by {by}: partial results, the last block cut short.", ""]
    for name, t in summary["targets"].items():
        lines += target_section(name, t)
    sweep = summary.get("sweep")
    if sweep:
        lines += [
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
        lines.append("")
    if comparison:
        lines += [comparison]
    lines += slowest
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


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
    for name, t in summary["targets"].items():
        m = t["metrics"]
        rows.append(
            (
                name,
                str(t["requests"]["ok"]),
                str(t["requests"]["failed"]),
                _rate(t["throughput"]["requests_per_s"]),
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
    text.append("(latencies in ms)")
    for name, t in summary["targets"].items():
        for reason in t["invalid_reasons"]:
            text.append(f"{name}: INVALID: {reason}")
        saturated = steady.label(t.get("steady_state"))
        if saturated:
            text.append(f"{name}: {saturated.replace('saturated', 'SATURATED', 1)}")
        stream = t.get("stream")
        if stream and stream["buffered"]:
            text.append(f"{name}: {stream['verdict']}")
    return "\n".join(text)


def plot_cdfs(data: RunData, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (key, label) in zip(
        axes, (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")), strict=True
    ):
        for name in dict.fromkeys(r.target for r in data.records):
            values = sorted(
                getattr(r, key) * 1e3
                for r in data.records
                if r.target == name and r.ok and not r.excluded and getattr(r, key) is not None
            )
            if values:
                ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=name)
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_timeline(data: RunData, path: Path) -> None:
    """TTFT and TPOT per request over time, GPU memory and power on the same time axis."""
    t0 = min((r.intended_at for r in data.records), default=0.0)
    panels = 4 if data.gpu else 2
    fig, axes = plt.subplots(panels, 1, figsize=(12, 2.6 * panels), sharex=True)
    for ax, (key, label) in zip(
        axes, (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)")), strict=False
    ):
        for name in dict.fromkeys(r.target for r in data.records):
            points = [
                (r.intended_at - t0, getattr(r, key) * 1e3)
                for r in data.records
                if r.target == name and r.ok and getattr(r, key) is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.scatter(xs, ys, s=3, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(markerscale=4)
    if data.gpu:
        for ax, attr, label in (
            (axes[2], "memory_mib", "GPU memory (MiB)"),
            (axes[3], "power_w", "GPU power (W)"),
        ):
            series: dict[str, list[tuple[float, float]]] = {}
            for s in data.gpu:
                value = getattr(s, attr)
                if value is not None:
                    series.setdefault(f"gpu {s.gpu}", []).append((s.at - t0, value))
            for label_, points in series.items():
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=label_)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_sweep(summary: dict[str, Any], path: Path) -> None:
    """The throughput–latency curve: one line per target, one point per load level."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    names = dict.fromkeys(n for p in summary["sweep"]["points"] for n in p["targets"])
    for name in names:
        points = [p["targets"][name] for p in summary["sweep"]["points"] if name in p["targets"]]
        x = [t["throughput"]["output_tokens_per_s"] or 0 for t in points]
        saturated = [not (t.get("steady_state") or {"steady": True})["steady"] for t in points]
        for ax, key in zip(axes, ("ttft_s", "tpot_s"), strict=True):
            for pct, style in (("p50", "-o"), ("p99", "--x")):
                y = [(t["metrics"][key][pct] or float("nan")) * 1e3 for t in points]
                ax.plot(x, y, style, label=f"{name} {pct.upper()}")
                _mark_saturated(ax, x, y, saturated)
    for ax, label in zip(axes, ("TTFT (ms)", "TPOT (ms)"), strict=True):
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_time_split(summary: dict[str, Any], path: Path) -> None:
    """Where the time went: each target's mean TTFT and E2E as stacked bars of their parts."""
    bars = [
        (f"{name} {split.figure}", split)
        for name, t in summary["targets"].items()
        for split in timesplit.splits(t)
    ]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(bars) + 1.5))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {label: cycle[i % len(cycle)] for i, label in enumerate(timesplit.MEANING)}
    labelled: set[str] = set()
    for y, (_, split) in enumerate(bars):
        left = 0.0
        for label, value in split.parts:
            width = max(0.0, value) * 1e3  # a rest below zero is noise: drawn as nothing
            ax.barh(y, width, left=left, color=colors[label],
                    label=None if label in labelled else label)  # fmt: skip
            labelled.add(label)
            left += width
    ax.set_yticks(range(len(bars)), [label for label, _ in bars])
    ax.invert_yaxis()
    ax.set_xlabel("mean (ms)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SLOWEST = 5


def slowest_requests(data: RunData) -> list[str]:
    """The slowest measured requests of each target by TTFT and by E2E, with the ids that
    find them in the proxy's log lines and traces (links when --trace-url gave a template)."""
    template = data.meta.get("trace_url")
    lines = ["## Slowest requests", ""]
    for name in dict.fromkeys(r.target for r in data.records):
        ok = [r for r in data.records if r.target == name and r.ok and not r.excluded]
        for label, key in (("TTFT", "ttft_s"), ("E2E", "e2e_s")):
            ranked = sorted(
                (r for r in ok if getattr(r, key) is not None),
                key=lambda r, key=key: getattr(r, key),
                reverse=True,
            )[:SLOWEST]
            if not ranked:
                continue
            lines += [
                f"{name}, by {label}:",
                "",
                "| TTFT (ms) | answer TTFT | E2E (ms) | queue | server TTFT | network and proxy "
                "| stalls | request id | trace id |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for r in ranked:
                trace = r.trace_id or "—"
                if r.trace_id and template:
                    trace = f"[{r.trace_id}]({template.replace('{trace_id}', r.trace_id)})"
                queue, server, rest = ttft_split(r)
                lines.append(
                    f"| {ms(r.ttft_s)} | {ms(r.answer_ttft_s)} | {ms(r.e2e_s)} | {ms(queue)} "
                    f"| {ms(server)} | {ms(rest)} | {'—' if r.stalls is None else r.stalls} "
                    f"| `{r.request_id}` | {trace} |"
                )
            lines.append("")
    return lines if len(lines) > 2 else []


def ttft_split(r: Record) -> tuple[float | None, float | None, float | None]:
    """A request's TTFT as (server queue, server TTFT, the rest: network, proxy, client),
    from the server's own timings; all None when it sent none."""
    if r.ttft_s is None or r.server_queue_s is None or r.server_ttft_s is None:
        return None, None, None
    return r.server_queue_s, r.server_ttft_s, r.ttft_s - r.server_queue_s - r.server_ttft_s


def _mark_saturated(ax: Any, x: list[float], y: list[float], saturated: list[bool]) -> None:
    """Ring the points of saturated levels: their percentiles grow with the run's length."""
    ring = [(a, b) for a, b, s in zip(x, y, saturated, strict=True) if s]
    if ring:
        xs, ys = zip(*ring, strict=True)
        shown = "saturated" in ax.get_legend_handles_labels()[1]
        label = "_nolegend_" if shown else "saturated"
        ax.scatter(xs, ys, s=120, facecolors="none", edgecolors="red", label=label)


def write(out: Path, data: RunData, summary: dict[str, Any], comparison: str | None = None) -> Path:
    """report.md (with the comparison section, if any) and its plots into the run directory."""
    plots = ["latency_cdf.png", "timeline.png"]
    plot_cdfs(data, out / plots[0])
    plot_timeline(data, out / plots[1])
    if summary.get("sweep"):
        plots.append("throughput_latency.png")
        plot_sweep(summary, out / plots[-1])
    if any(t.get("slices") for t in summary["targets"].values()):
        plots.append("slices.png")
        slices_plot.plot(summary, out / plots[-1])
    if any(timesplit.splits(t) for t in summary["targets"].values()):
        plots.append("time_split.png")
        plot_time_split(summary, out / plots[-1])
    path = out / "report.md"
    path.write_text(markdown(summary, data.meta, plots, comparison, slowest_requests(data)))
    return path
