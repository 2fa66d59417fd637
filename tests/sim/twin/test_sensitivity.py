"""The derivatives a fit steps by: a request's queue time moves with the steps it waited in
the queue, not with the step in flight when it arrived (vLLM's queue time leaves that out)."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.sim.model import presets
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch
from loadgen.sim.twin import deployment
from loadgen.sim.twin.cluster import Sampled
from loadgen.sim.twin.deployment import Request
from loadgen.sim.twin.sensitivity import Sensitivity

PRESET = presets.load("llama-70b-bf16-tp4-a100")


def _run(
    preset: presets.Preset, requests: list[Request]
) -> tuple[Sensitivity, list[float], list[deployment.Timing]]:
    sens = Sensitivity(preset, ["host_overhead"], len(requests))
    starts: list[float] = []

    def observe(replica: int, batch: Batch, step: StepTime, now: float, sampled: Sampled) -> None:
        starts.append(now - step.total)
        sens(replica, batch, step, now, sampled)

    return sens, starts, deployment.run(preset, requests, observe=observe).timings


def test_a_queue_moves_with_the_steps_waited_in_the_queue() -> None:
    one = dataclasses.replace(PRESET, engine=dataclasses.replace(PRESET.engine, max_num_seqs=1))
    sens, starts, (_, waiting) = _run(one, [Request(0.0, 100, 30), Request(0.25, 100, 5)])
    waited = sum(1 for s in starts if waiting.queued - 1e-9 <= s < waiting.scheduled - 1e-9)
    assert waited > 1
    [moved] = sens.of(1, "queue", waiting)
    assert moved == pytest.approx(one.perf.efficiency.host_overhead * waited)


def test_a_request_admitted_at_once_has_a_queue_nothing_moves() -> None:
    sens, _, (_, joined) = _run(PRESET, [Request(0.0, 100, 30), Request(0.25, 100, 5)])
    assert joined.engine_arrival < joined.queued == joined.scheduled  # arrived mid-step
    assert sens.of(1, "queue", joined) == [0.0]
    # the client's TTFT still holds the step in flight
    [ttft] = sens.of(1, "ttft", joined)
    assert ttft == pytest.approx(2 * PRESET.perf.efficiency.host_overhead)  # and its own
