"""The capacity search's closing sentence, built from capacity.json's entries made here: how
far a trace's traffic can grow, what breaks first above it, how many replicas a share under
1x asks for, and how sure the figure is — one builder for every axis."""

from __future__ import annotations

from typing import Any

from loadgen.capacity.advice import replicas, sentence
from loadgen.reports.capacity import binding_slo

SLO = {
    "ttft": {"limit_s": 0.8, "percentile": "p90"},
    "tpot": {"limit_s": 0.05, "percentile": "p90"},
}
HEAD = "At TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90), "


def entry(capacity: float | None, failing: float | None, **more: Any) -> dict[str, Any]:
    """A target of capacity.json: its bracket, binding TTFT at 1.24 s unless told."""
    t = {
        "capacity": capacity,
        "bracket": [capacity, failing],
        "undecided": [],
        "converged": True,
        "output_tokens_per_s": 700.0,
        "binding": "ttft",
        "binding_slo": None
        if failing is None
        else {"metric": "ttft", "percentile": "p90", "limit_s": 0.8, "value_s": 1.24,
              "level": failing},
    }  # fmt: skip
    t.update(more)
    return t


def said(by: str, **targets: dict[str, Any]) -> str:
    return sentence({"by": by, "slo": SLO, "precision": 0.05, "targets": targets})


def test_traffic_that_can_grow_names_the_slo_that_breaks_first() -> None:
    assert said("speed", **{"llama-70b": entry(1.7, 1.8)}) == (
        HEAD + "this traffic can grow 1.7x on llama-70b before TTFT P90 passes 800 ms "
        "(1.24 s at 1.8x)."
    )


def test_an_agents_trace_says_its_speed_in_sessions_a_minute_too() -> None:
    grows = entry(1.7, 1.8, sessions_per_min=41.23)
    held = entry(0.4, 0.42, sessions_per_min=1234.5)
    assert said("speed", **{"llama-70b": grows, "qwen-72b": held}) == (
        HEAD + "this traffic can grow 1.7x (41.2 sessions/min) on llama-70b before TTFT P90 "
        "passes 800 ms (1.24 s at 1.8x); qwen-72b holds 0.4x (1,234 sessions/min) of this "
        "traffic before TTFT P90 passes 800 ms (1.24 s at 0.42x): it needs at least 3 "
        "replicas like this one; at 0.4x llama-70b still has 325% headroom."
    )
    assert "sessions/min" not in said("speed", x=entry(1.7, 1.8, sessions_per_min=None))


def test_under_the_traffic_it_says_how_many_replicas_at_least() -> None:
    tpot = {"metric": "tpot", "percentile": "p90", "limit_s": 0.05, "value_s": 0.061, "level": 0.42}
    text = said(
        "speed",
        **{
            "qwen-72b": entry(0.4, 0.42, binding="tpot", binding_slo=tpot),
            "llama-70b": entry(1.2, 1.25),
        },
    )
    assert text == (
        HEAD + "this traffic can grow 1.2x on llama-70b before TTFT P90 passes 800 ms (1.24 s "
        "at 1.25x); qwen-72b holds 0.4x of this traffic before TPOT P90 passes 50 ms (61 ms at "
        "0.42x): it needs at least 3 replicas like this one; at 0.4x llama-70b still has 200% "
        "headroom."
    )
    assert [replicas(c) for c in (1, 0.5, 0.4, 0.2, 0.333, 0.125)] == [1, 2, 3, 5, 4, 8]


def test_a_wide_bracket_is_said_to_be_one() -> None:
    text = said("speed", a=entry(0.3, 0.6, converged=False))
    assert text.endswith(
        "a holds 0.3x of this traffic before TTFT P90 passes 800 ms (1.24 s at 0.6x): it needs "
        "at least 4 replicas like this one (bracket [0.3, 0.6] still wider than 5%: the true "
        "figure may be higher)."
    )
    assert said("speed", a=entry(4, None, binding=None, converged=False)) == (
        HEAD + "this traffic can grow at least 4x on a (nothing above it was tried)."
    )


def test_saturation_errors_or_an_undecided_level_end_the_range_in_words() -> None:
    saturated = entry(2, 2.2, binding="steady_state", binding_slo=None)
    assert said("speed", a=saturated) == (
        HEAD + "this traffic can grow 2x on a before it falls behind the load (it saturates "
        "between 2x and 2.2x)."
    )
    errors = entry(3.1, 3.4, binding="errors", binding_slo=None)
    assert said("rate", a=errors) == (
        HEAD + "a sustains 3.1 req/s (700 output tok/s) before more than 1% of its requests "
        "fail (at 3.4 req/s)."
    )
    undecided = entry(8, None, binding=None, undecided=[9])
    assert said("concurrency", a=undecided) == (
        HEAD + "a sustains 8 concurrent streams (700 output tok/s), with 9 concurrent streams "
        "still undecided."
    )


def test_none_met_even_the_lowest_speed() -> None:
    assert said("speed", a=entry(None, 0.125)) == (
        HEAD + "a meets them at no level tried: it needs at least 9 replicas like this one."
    )


def test_the_binding_slo_is_the_one_missed_by_most_at_the_lowest_failing_probe() -> None:
    probe = {"level": 2.0, "ratios": {"ttft": 1.3, "tpot": 1.6}, "steady": True,
             "ttft_s": {"p90": 1.04}, "tpot_s": {"p90": 0.08}}  # fmt: skip
    assert binding_slo(probe, SLO) == {
        "metric": "tpot", "percentile": "p90", "limit_s": 0.05, "value_s": 0.08, "level": 2.0
    }  # fmt: skip
    saturated = {**probe, "ratios": {"ttft": 0.9, "tpot": 0.7}, "steady": False}
    assert binding_slo(saturated, SLO) is None  # saturation, not an SLO, ends the range
    assert binding_slo(None, SLO) is None


def test_the_cost_and_energy_at_capacity_join_the_sentence() -> None:
    cost = {"usd_per_mtok_output": 0.834, "usd_per_mtok_input_split": None}
    energy = {"joules_per_output_token": 1.234}
    text = said("rate", **{"llama-70b": entry(7.2, 8.0, cost=cost, energy=energy)})
    assert "llama-70b sustains 7.2 req/s (700 output tok/s) before TTFT P90" in text
    at_capacity = "(at 7.2 req/s: $0.83 / Mtok out, 1.23 J / output token)."
    assert text.endswith(f"(1.24 s at 8 req/s) {at_capacity}")
    assert "Mtok" not in said("rate", **{"llama-70b": entry(7.2, 8.0)})  # no price, no figure
