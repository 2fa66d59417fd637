"""bench/proxy_overhead.py's arithmetic (no servers), and the performance page it generates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import overhead_figures as figures  # noqa: E402
import performance_tables as tables  # noqa: E402


def cell_row(repeat: int, target: str, tokens: int, per_request_us: float, per_event_us: float):
    """A row as figures.row makes it, for a cell whose CPU is exactly linear in its events."""
    events_per_request = tokens + 3  # role, content…, finish, [DONE]
    completed = 1000
    cpu_us = completed * (per_request_us + per_event_us * events_per_request)
    return {
        "target": target,
        "streams": 64,
        "tokens": tokens,
        "stream": tokens > 1,
        "repeat": repeat,
        "requests": completed,
        "completed": completed,
        "errors": 0,
        "events_per_s": completed * events_per_request / 10,
        "requests_per_s": completed / 10,
        "ttft_p50_ms": 50.0 + (0.4 if target == "proxy" else 0.0) + repeat * 0.1,
        "ttft_p99_ms": 52.0 + (2.0 if target == "proxy" else 0.0),
        "inter_event_p99_ms": 10.5,
        "e2e_p50_ms": 700.0,
        "cpu_us_per_event": cpu_us / (completed * events_per_request),
        "cpu_us_per_request": cpu_us / completed,
        "events_per_request": events_per_request,
        "rss_mib": 50.0,
        "upstream_cpu_pct": 10.0,
        "client_cpu_pct": 30.0,
    }


def rows(repeats: int = 6) -> list[dict]:
    out = []
    for repeat in range(repeats):
        for tokens in (8, 64, 256):
            out.append(cell_row(repeat, "direct", tokens, 0.0, 0.0))
            out.append(cell_row(repeat, "nginx", tokens, 30.0, 10.0))
            out.append(cell_row(repeat, "proxy", tokens, 250.0 + repeat, 18.0))
    return out


def test_the_fit_separates_per_request_from_per_event_cost() -> None:
    runs = rows()
    figures.compare(runs)
    fits = [f for f in figures.fit(runs) if f["target"] == "proxy"]
    assert len(fits) == 6
    for fit in fits:
        assert fit["intercept_us_per_request"] == pytest.approx(250.0 + fit["repeat"])
        assert fit["slope_us_per_event"] == pytest.approx(18.0)
        assert fit["slope_vs_nginx"] == pytest.approx(1.8)


def test_a_long_cell_off_by_its_noise_does_not_decide_the_intercept() -> None:
    """256 tokens 10% high (a shared box's drift on a 5 ms request) moves the intercept by
    less than a tenth: the unweighted fit lost a third of it (175 µs for 250)."""
    runs = [r for r in rows(1) if r["target"] == "proxy"]
    long = next(r for r in runs if r["tokens"] == 256)
    long["cpu_us_per_request"] *= 1.1
    (fit,) = figures.fit(runs)
    assert fit["intercept_us_per_request"] == pytest.approx(250.0, rel=0.1)


def test_figures_are_compared_within_their_repeat_and_judged_on_the_median() -> None:
    runs = rows()
    figures.compare(runs)
    summary = figures.summarise(runs, figures.fit(runs))
    verdicts = [figures.judge(goal, summary) for goal in figures.goals(64)]
    intercept, exporting, single, per_event, per_event_256, added50, added99, events, rss = (
        verdicts
    )
    assert intercept["median"] == pytest.approx(252.5)
    assert intercept["ci95"] == pytest.approx([250.0, 255.0])  # 6 repeats: [min, max]
    assert intercept["verdict"] == "met"
    assert added99["median"] == pytest.approx(2.0) and added99["verdict"] == "not met"
    assert added50["verdict"] == "met" and events["verdict"] == "met"
    assert per_event["median"] == pytest.approx(
        (250.0 + 2.5 + 18.0 * 67) / (30.0 + 10.0 * 67)
    )  # CPU per event over nginx's, both with their per-request share
    assert exporting["verdict"] is None and single["verdict"] is None  # no such cells ran
    assert per_event_256["verdict"] == "not met"  # ×1.88: 18 µs over 10, and the intercepts
    assert rss["median"] == pytest.approx(50.0) and rss["verdict"] == "not met"  # over 46 MiB


def test_the_pure_builds_goals_are_judged_on_its_own_cells() -> None:
    runs = [
        {**r, "target": "proxy-pure", "cpu_us_per_request": r["cpu_us_per_request"] * 2}
        for r in rows()
        if r["target"] == "proxy"
    ]
    runs += rows()
    figures.compare(runs)
    summary = figures.summarise(runs, figures.fit(runs))
    compiled = figures.judge(figures.goals(64)[0], summary)
    pure = figures.judge(figures.goals(64, "proxy-pure")[0], summary)
    assert pure["goal"] == "proxy-pure: " + compiled["goal"]
    assert compiled["verdict"] == "met" and pure["verdict"] == "not met"
    assert pure["median"] == pytest.approx(2 * compiled["median"], rel=0.05)


def test_five_repeats_cannot_bound_a_median_and_the_verdict_says_so() -> None:
    runs = rows(5)
    figures.compare(runs)
    summary = figures.summarise(runs, figures.fit(runs))
    goal = figures.goals(64)[0]
    assert figures.judge(goal, summary)["verdict"] == "met (too few runs to bound the median)"


def test_the_performance_page_is_what_its_json_files_make() -> None:
    assert tables.main(["--check"]) == 0
