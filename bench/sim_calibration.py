"""loadgen.sim against published measurements: the setup replayed, simulated vs published.

    .venv/bin/python bench/sim_calibration.py

Replays each published setup through the simulator's engine and performance model on a
virtual clock (loadgen/sim/calibration.py: no waiting, ten seconds or so) and prints the
simulator's figure beside the published one with the error. tests/sim/test_calibration.py
fails when a Qwen point is more than 10% off, or a TPOT under load leaves its band (10% up
to 16 clients, 20% above); TTFT and throughput under load are printed, not checked (README).
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
    loads = calibration.lmdeploy_llama2_70b()
    table(calibration.LMDEPLOY_SOURCE, [p for load in loads for p in (load.ttft, load.tpot)])
    table(calibration.LMDEPLOY_SOURCE, [load.throughput for load in loads])


if __name__ == "__main__":
    main()
