"""The agent's view in a run's outputs: a replay of the agent capture (on the twin, and
live against the simulator, whose records carry trace ids) has summary.json's `sessions`
as counted here from its requests.jsonl, and report.md and report.html say them alike; a
run without sessions has `sessions: null` and no such section."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.stats import union_seconds
from loadgen.commands.cli import main
from loadgen.stack.processes import simulator

CAPTURE = Path(__file__).parents[1] / "fixtures" / "agent-capture.jsonl"
PRESET = "llama-70b-bf16-tp4-a100"  # the capture's simulator
TRACE = "http://127.0.0.1:3000/explore?trace={trace_id}"


def run(out: Path, target: str, *flags: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    argv = ["--target", target, "--out", str(out), "--no-progress", "--warmup", "0s", *flags]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    (block,) = summary["targets"].values()
    lines = (out / "requests.jsonl").read_text().splitlines()
    return block["sessions"], [json.loads(x) for x in lines]


def p90(values: list[float]) -> float:
    """numpy's linear P90, by the standard library."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def by_hand(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the summary should hold, counted from the records themselves."""
    sessions: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["session"] is not None and r["excluded"] is None:
            sessions[r["block"], r["session"]].append(r)
    spans, shares, slowest = [], [], []
    for (_, name), calls in sessions.items():
        span = max(r["end_at"] for r in calls) - min(r["sent_at"] for r in calls)
        share = union_seconds((r["sent_at"], r["end_at"]) for r in calls) / span
        longest = max(calls, key=lambda r: r["end_at"] - r["sent_at"])
        spans.append(span)
        shares.append(share)
        slowest.append((span, name, len(calls), longest["trace_id"]))
    turns: dict[int, list[float]] = defaultdict(list)
    for calls in sessions.values():
        for r in calls:
            turns[r["turn"]].append(r["ttft_s"])
    every = [r for calls in sessions.values() for r in calls]
    return {
        "sessions": len(sessions),
        "calls": len(every),
        "span_s": {"p50": statistics.median(spans), "p90": p90(spans)},
        "model_share": {"p50": statistics.median(shares), "p90": p90(shares)},
        "prefix_hit_share": sum(r["cached_tokens"] for r in every)
        / sum(r["input_tokens"] for r in every),
        "ttft_by_turn": [
            {"turn": t, "calls": len(v), "p50_s": statistics.median(v), "p90_s": p90(v)}
            for t, v in sorted(turns.items())
        ],
        "slowest": sorted(slowest, reverse=True)[:3],
    }


def check(block: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    expected = by_hand(records)
    assert block["sessions"] == expected["sessions"] == 3
    assert block["calls"] == expected["calls"] == 24
    for key in ("span_s", "model_share", "prefix_hit_share"):
        assert block[key] == pytest.approx(expected[key]), key
    assert len(block["ttft_by_turn"]) == len(expected["ttft_by_turn"])
    for turn, counted in zip(block["ttft_by_turn"], expected["ttft_by_turn"], strict=True):
        assert turn == pytest.approx(counted)
    slowest = [(s["session"], s["calls"], s["trace_id"]) for s in block["slowest"]]
    assert slowest == [(name, calls, trace) for _, name, calls, trace in expected["slowest"]]
    spans = [s["span_s"] for s in block["slowest"]]
    assert spans == pytest.approx([span for span, *_ in expected["slowest"]])
    return expected


def section(out: Path) -> tuple[str, str]:
    """report.md's Sessions section, and report.html's."""
    md = (out / "report.md").read_text()
    md = md[md.index("## Sessions") :]
    page = unescape((out / "report.html").read_text())
    page = page[page.index('<section id="sessions">') :]
    return md[: md.index("\n## ", 1)], page[: page.index("</section>")]


def test_a_replay_on_the_twin_has_its_sessions_figures_and_section(tmp_path: Path) -> None:
    out = tmp_path / "twin"
    block, records = run(out, f"virtual:{PRESET}", "--replay", str(CAPTURE))
    expected = check(block, records)
    md, page = section(out)
    share = f"{expected['model_share']['p50']:.0%}"
    opening = f"3 sessions, 8.0 calls each: the model had {share} of a session's time (median)"
    assert opening in md and opening in page
    enough = [t for t in expected["ttft_by_turn"] if t["calls"] >= 5]  # a median's worth
    said = f"{enough[-1]['p50_s'] * 1e3:.0f} ms at turn {enough[-1]['turn']} (P50 of turns with"
    assert said in md and said in page
    last = expected["ttft_by_turn"][-1]
    assert f"| {last['turn']} | {last['calls']} | {last['p50_s'] * 1e3:.1f} |" in md
    for span, session, calls, _trace in expected["slowest"]:  # the twin sends no traceparent
        assert f"| `{session}` | {span:.2f} | {calls} |" in md
        assert f"<td><code>{session}</code></td><td>{span:.2f}</td>" in page
    assert md.count("| — |") == 3


@pytest.mark.timeout(120)
def test_a_live_replay_links_its_slowest_sessions_traces(tmp_path: Path) -> None:
    out = tmp_path / "live"
    sim = ("--preset", PRESET, "--served-model-name", "sim", "--enable-prompt-tokens-details")
    with simulator(*sim) as url:
        flags = ("--replay", str(CAPTURE), "--replay-speed", "4", "--gap-scale", "0")
        block, records = run(out, url, *flags, "--trace-url", TRACE)
    expected = check(block, records)
    md, page = section(out)
    for _span, _session, _calls, trace in expected["slowest"]:
        link = TRACE.replace("{trace_id}", trace)
        assert f"[{trace}]({link})" in md
        assert f'<a href="{link}">{trace}</a>' in page


def test_a_run_without_sessions_has_none_and_no_section(tmp_path: Path) -> None:
    out = tmp_path / "plain"
    block, records = run(out, f"virtual:{PRESET}", "--rate", "2", "--duration", "5s")
    assert records and all(r["session"] is None for r in records)
    assert block is None
    assert "## Sessions" not in (out / "report.md").read_text()
    assert 'id="sessions"' not in (out / "report.html").read_text()
