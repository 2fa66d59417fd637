"""The virtual clock's order: whatever is due at an instant runs before a replica's next
step there, whether or not that step went through the calendar."""

from __future__ import annotations

import dataclasses
import random

import pytest

from loadgen.sim.model import presets
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.model.sequence import Seq
from loadgen.sim.twin import cluster

PRESET = presets.load("llama-70b-bf16-tp4-a100")  # no front-end delay: arrival is entry
# an API server in front: requests enter the engine late, and tokens leave it late
FRONTED = dataclasses.replace(
    PRESET,
    perf=dataclasses.replace(
        PRESET.perf,
        efficiency=dataclasses.replace(
            PRESET.perf.efficiency,
            frontend_request=0.004,
            frontend_token=2e-6,
            frontend_output_token=1e-4,
        ),
    ),
)


def step_ends(
    seqs: list[Seq],
    replicas: int = 1,
    follow_up: cluster.FollowUp | None = None,
    preset: presets.Preset = PRESET,
) -> list[tuple[int, float]]:
    """Each step's replica and end, in the order the observer heard of them."""
    ends: list[tuple[int, float]] = []

    def observe(replica: int, _b: Batch, _s: StepTime, now: float, _x: cluster.Sampled) -> None:
        ends.append((replica, now))

    last = cluster.replay(preset, seqs, follow_up, observe, replicas)
    assert last == ends[-1][1]  # the run ends when its last step does
    return ends


def test_a_request_arriving_as_a_step_ends_joins_the_next_step() -> None:
    [(_, first_end), *_] = step_ends([Seq(500, 20, 0.0)])
    alone, joining = Seq(500, 20, 0.0), Seq(500, 20, first_end)
    step_ends([alone, joining])
    assert joining.scheduled_at == first_end  # not a step later


def test_a_follow_up_sent_as_its_parent_ends_joins_the_next_step() -> None:
    running, parent = Seq(500, 40, 0.0), Seq(200, 3, 0.0)
    children: list[Seq] = []

    def follow_up(done: Seq, now: float) -> list[Seq]:
        if done is not parent:
            return []
        children.append(Seq(300, 5, now))
        return children

    step_ends([running, parent], follow_up=follow_up)
    [child] = children
    assert parent.finished_at is not None and child.scheduled_at == parent.finished_at
    assert child.finished_at is not None and child.finished_at < running.finished_at


@pytest.mark.parametrize("preset", [PRESET, FRONTED], ids=["engine", "front_end"])
def test_replicas_step_in_time_order(preset: presets.Preset) -> None:
    rng = random.Random(7)
    seqs = [Seq(rng.randint(50, 2000), rng.randint(1, 60), rng.uniform(0, 3)) for _ in range(60)]
    parents = {id(seq) for seq in seqs[:20]}

    def follow_up(done: Seq, now: float) -> list[Seq]:  # a turn after each of the first 20
        return [Seq(done.known + 30, 10, now)] if id(done) in parents else []

    ends = step_ends(seqs, replicas=3, follow_up=follow_up, preset=preset)
    times = [now for _, now in ends]
    assert times == sorted(times)  # no replica ran ahead of another's step
    assert {replica for replica, _ in ends} == {0, 1, 2}
    assert len(ends) > 100


def test_replicas_ending_a_step_at_one_instant_go_in_their_order() -> None:
    ends = step_ends([Seq(500, 6, 0.0), Seq(500, 6, 0.0)], replicas=2)
    assert ends[:4] == [(0, ends[0][1]), (1, ends[0][1]), (0, ends[2][1]), (1, ends[2][1])]
    assert ends[2][1] > ends[0][1]
