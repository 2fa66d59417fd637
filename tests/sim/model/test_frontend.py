"""The API server in front of the engine: requests on the way in (its one serial process and
the time each spends outside the engine on its own), sampled tokens on the way out."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.sim.model.frontend import Frontend
from loadgen.sim.model.roofline import Efficiency
from loadgen.sim.model.sequence import Seq

NONE = Efficiency(mbu=0.5, mfu=0.5)


def step(streams: int) -> list[tuple[Seq, float | None]]:
    """What a step sampled: one token for each of `streams` running sequences."""
    sampled: list[tuple[Seq, float | None]] = []
    for _ in range(streams):
        seq = Seq(prompt_tokens=10, output_tokens=5, arrival=0.0)
        seq.stepped = 1
        sampled.append((seq, None))
    return sampled


def send(front: Frontend, now: float, streams: int) -> float:
    """The step's send time, which every sequence in it learns."""
    sampled = step(streams)
    sent = front.send(now, sampled)
    assert all(seq.first_sent_at == seq.last_sent_at == sent for seq, _ in sampled)
    return sent


def test_without_costs_nothing_waits() -> None:
    front = Frontend(NONE)
    assert not front.active
    assert send(front, 1.0, 50) == 1.0
    assert front.admit(1.0, 1000) == 1.0


def test_a_request_waits_behind_the_tokens_sent_before_it() -> None:
    front = Frontend(dataclasses.replace(NONE, frontend_request=0.002, frontend_output_token=1e-3))
    assert front.active
    assert send(front, 0.0, 10) == pytest.approx(0.010)  # ten streams' tokens: 10 ms of work
    assert front.admit(0.004, 500) == pytest.approx(0.012)  # behind them, then its own 2 ms
    assert send(front, 0.011, 10) == pytest.approx(0.022)  # and the next step's behind it


def test_without_a_cost_per_output_token_tokens_pass_a_busy_front_end() -> None:
    """A preset with only the older terms times what it did: tokens are not held."""
    front = Frontend(dataclasses.replace(NONE, frontend_request=0.05))
    assert front.admit(0.0, 100) == pytest.approx(0.05)
    assert send(front, 0.01, 10) == 0.01
    assert front.admit(0.02, 100) == pytest.approx(0.10)


def test_a_latency_delays_each_request_alike_and_queues_none() -> None:
    """Time outside the engine that requests do not share: a burst reaches the engine all
    at once, each as late as one alone, behind the serial work only."""
    front = Frontend(dataclasses.replace(NONE, frontend_latency=0.009))
    assert front.active
    assert [front.admit(1.0, 100) for _ in range(3)] == pytest.approx([1.009] * 3)
    assert send(front, 1.02, 10) == 1.02  # tokens are not held
    serial = Frontend(dataclasses.replace(NONE, frontend_latency=0.009, frontend_request=0.001))
    assert [serial.admit(1.0, 100) for _ in range(3)] == pytest.approx([1.010, 1.011, 1.012])
