"""loadgen.sim against published measurements: the setup replayed, simulated vs published.

    .venv/bin/python bench/sim_calibration.py

Replays each published setup through the simulator's engine and performance model on a
virtual clock (loadgen/sim/calibration.py: no waiting, a second or so) and prints the
simulator's figure beside the published one with the error. tests/sim/test_calibration.py
fails when any point is more than 10% off.
"""

from __future__ import annotations

from loadgen.sim import calibration


def main() -> None:
    print(f"source: {calibration.QWEN_SOURCE}")
    print(f"{'setup':<34} {'published':>10} {'simulated':>10} {'error':>8}")
    for point in calibration.qwen_speed():
        print(
            f"{point.setup:<34} {point.published:>10.2f} {point.simulated:>10.2f} "
            f"{point.error:>+8.1%}  {point.unit}"
        )


if __name__ == "__main__":
    main()
