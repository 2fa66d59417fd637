"""The roofline bounds a plan prunes with hold for the twin itself: no request's TPOT is
under the floor, no replica serves more output tokens per second than the ceiling. A bound
that did not hold would prune a candidate that could have won."""

from __future__ import annotations

import pytest

from loadgen.plan import bounds
from loadgen.sim import twin
from loadgen.sim.model import presets

DRAFT = (
    '--speculative-config \'{"method": "draft_model", "model": "llama-3-8b-awq-a100", '
    '"num_speculative_tokens": 5, "acceptance_rate": 0.75}\''
)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("llama-70b-awq-tp4-a100", ""),
        ("qwen-72b-gptq-tp4-a100", "--max-num-seqs 64"),
        ("llama-70b-awq-tp4-a100", f"--tensor-parallel-size 2 {DRAFT}"),
    ],
)
def test_no_request_beats_the_tpot_floor_nor_a_replica_the_ceiling(name: str, args: str) -> None:
    preset, why = bounds.fit(presets.load(name), args)
    assert preset is not None, why
    alone = twin.run(preset, [twin.Request(0.0, 64, 64)]).timings[0]
    assert alone.tpot is not None and alone.tpot >= bounds.tpot_floor(preset)
    assert alone.tpot < 3 * bounds.tpot_floor(preset)  # a floor, not a figure from elsewhere
    burst = [twin.Request(0.0, 64, 256) for _ in range(600)]
    result = twin.run(preset, burst)
    tokens_per_s = 600 * 256 / result.elapsed
    assert tokens_per_s <= bounds.ceiling(preset)


def test_what_does_not_fit_says_why_in_vllms_words() -> None:
    preset, why = bounds.fit(presets.load("llama-70b-bf16-tp4-a100"), "--tensor-parallel-size 1")
    assert preset is None
    assert why == "the weights do not fit in GPU memory: 131.5 GiB of weights per GPU, 80 GiB each"
    tight = "--tensor-parallel-size 2 --gpu-memory-utilization 0.83"
    preset, why = bounds.fit(presets.load("llama-70b-bf16-tp4-a100"), tight)
    assert preset is None and "To serve at least one request with the models's max seq len" in why


def test_the_replicas_floor_grows_with_the_traffic() -> None:
    preset = presets.load("llama-70b-awq-tp4-a100")
    ceiling = bounds.ceiling(preset)
    light = bounds.Traffic(1.0, ceiling * 0.5, 512, 64)
    heavy = bounds.Traffic(1.0, ceiling * 2.5, 512, 64)
    assert bounds.replicas_floor(preset, light, 1.0) == 1
    assert bounds.replicas_floor(preset, heavy, 1.0) == 3
    assert bounds.replicas_floor(preset, heavy, 1.3) == 4
