"""loadgen.sim against published measurements: the setup replayed, simulated vs published.

    .venv/bin/python bench/sim_calibration.py

Replays each published setup through the simulator's engine and performance model on a
virtual clock (loadgen/sim/calibration.py: no waiting, twenty seconds or so) and prints every
source's rows: the simulator's figure beside the published one, with the error.
tests/sim/test_calibration.py holds the bands: batch-1 speed and TPOT within 10%, TTFT
medians under load within 25% of vLLM, TTFT against TurboMind within its stated band
(docs/sim/calibration.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from loadgen.sim import calibration
from loadgen.sim.calibration import Point


def table(source: str, points: Iterable[Point]) -> None:
    print(f"\nsource: {source}")
    print(f"{'setup':<34} {'published':>10} {'simulated':>10} {'error':>8}")
    for point in points:
        print(
            f"{point.setup:<34} {point.published:>10.3f} {point.simulated:>10.3f} "
            f"{point.error:>+8.1%}  {point.unit}"
        )


def main() -> None:
    table(calibration.QWEN_SOURCE, calibration.qwen_speed())
    rates = calibration.vllm_pcie_llama33_70b()
    table(
        calibration.VLLM_PCIE_SOURCE,
        [p for rate in rates for p in (rate.ttft, rate.tpot, *rate.others)],
    )
    loads = calibration.lmdeploy_llama2_70b()
    table(calibration.LMDEPLOY_SOURCE, [p for load in loads for p in (load.ttft, load.tpot)])
    table(calibration.LMDEPLOY_SOURCE, [load.throughput for load in loads])


if __name__ == "__main__":
    main()
