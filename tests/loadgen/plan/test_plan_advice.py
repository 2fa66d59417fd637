"""A plan's answer from plan.json's entries: the range of replicas an uncertainty allows,
the ranking and who cannot be told apart, the cost–headroom front, and the sentence."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.plan import advice

SLO = {
    "ttft": {"limit_s": 0.8, "percentile": "p90"},
    "tpot": {"limit_s": 0.05, "percentile": "p90"},
}


def entry(name: str, replicas: int, share: float, usd: float, gpus: int = 2, u: float = 0.15):
    e: dict[str, Any] = {
        "name": name,
        "gpu": "h100-sxm",
        "gpus": gpus,
        "dtype": "awq",
        "usd_per_gpu_hour": usd,
        "status": "ranked",
        "replicas": replicas,
        "basis": {
            "kind": "datasheet",
            "uncertainty": u,
            "said": "a datasheet preset: uncalibrated",
        },
        "searches": [
            {
                "replicas": 1,
                "share": share / replicas,
                "output_tokens_per_s": 1000.0,
                "binding_slo": None,
                "binding": "tpot",
            },
            {
                "replicas": replicas,
                "share": share,
                "output_tokens_per_s": 1000.0 * replicas,
                "binding_slo": None,
                "binding": "tpot",
            },
        ],
    }
    advice.priced(e, 1.0, 500.0)
    return e


def test_the_replica_range_holds_the_count_found() -> None:
    assert advice.replica_range(3, 1.05, 1.0, 0.15) == [3, 4]  # 0.35 per replica, ±15%
    assert advice.replica_range(3, 1.8, 1.0, 0.05) == [2, 3]
    assert advice.replica_range(1, 4.0, 1.0, 0.3) == [1, 1]


def test_cost_is_whole_over_output_tokens() -> None:
    e = entry("a", 3, 1.2, 2.0)
    assert e["usd_per_hour"] == 12.0  # 3 replicas x 2 GPUs x $2
    assert e["usd_per_mtok_output"] == 12.0 / (3000 * 3600) * 1e6
    assert e["joules_per_output_token"] == 6 * 500.0 / 3000


def test_overlapping_ranges_cannot_be_told_apart() -> None:
    near = [entry("a", 3, 1.05, 2.0), entry("b", 4, 1.5, 1.6), entry("c", 2, 1.9, 8.0, u=0.05)]
    assert advice.rank(near) == ["a", "b", "c"]
    a, b, c = near
    assert a["usd_per_hour_range"] == [12.0, 16.0]
    assert b["usd_per_hour_range"] == pytest.approx([9.6, 12.8])
    assert a["tied_with"] == ["b"] and b["tied_with"] == ["a"] and c["tied_with"] == []


def test_the_sentence_names_the_cheapest_and_the_next() -> None:
    entries = [entry("llama", 3, 1.05, 2.0), entry("qwen", 4, 1.5, 1.6)]
    result = {"slo": SLO, "headroom": 0.0, "candidates": entries, "ranking": advice.rank(entries)}
    said = advice.sentence(result)
    assert said.startswith(
        "Cheapest that meets TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90) on this traffic: "
        "3 replicas of llama (2×h100-sxm TP2 AWQ), $12.00/h, $1.11 per Mtok out (predicted "
        "from a datasheet preset: uncalibrated); next: 4 replicas of qwen"
    )
    assert said.endswith(": the two cannot be told apart.")


def test_with_nothing_ranked_it_says_why() -> None:
    left = [{"name": "x", "status": "does_not_fit"}, {"name": "y", "status": "cannot_meet"}]
    result = {"slo": SLO, "headroom": 0.2, "candidates": left, "ranking": []}
    assert advice.sentence(result) == (
        "Cheapest that meets TTFT ≤ 800 ms (P90) and TPOT ≤ 50 ms (P90) on this traffic grown "
        "1.2x: none of the 2 candidates (1 cannot meet, 1 does not fit)."
    )


def test_the_front_keeps_what_no_cheaper_deployment_beats() -> None:
    entries = [entry("a", 2, 1.3, 2.0), entry("b", 3, 1.1, 2.0)]
    advice.rank(entries)
    points = {(p["name"], p["replicas"]): p for p in advice.front(entries)}
    assert points[("a", 2)]["front"]  # $8/h, 30%
    assert not points[("b", 3)]["front"]  # $12/h, 10%: a's two replicas beat it
    assert ("a", 1) not in points  # 0.65x: does not hold the traffic
