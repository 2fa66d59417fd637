"""loadgen.sim against published measurements: the setup replayed, simulated vs published.

    .venv/bin/python bench/sim_calibration.py [--frontend]

Replays each published setup through the simulator's engine and performance model on a
virtual clock (loadgen/sim/twin/calibration.py: no waiting, twenty seconds or so) and prints every
source's rows: the simulator's figure beside the published one, with the error.
tests/sim/twin/test_calibration.py holds the bands: batch-1 speed and TPOT within 10%, TTFT
medians under load within 25% of vLLM, TTFT against TurboMind within its stated band
(docs/sim/calibration.md).

--frontend tries a serial API-server front end (a cost per request and per input token,
loadgen/sim/model/frontend.py) on the published TTFTs instead: each grid point's mean absolute
TTFT error per source, and, per source, the point chosen on half its rows (by prompt
length, by rate) with its error on the other half against no front end's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from loadgen.sim.twin import calibration
from loadgen.sim.twin.calibration import Point


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


def mean_error(points: Iterable[Point]) -> float:
    errors = [abs(p.error) for p in points]
    return sum(errors) / len(errors)


# each source's rows in two halves: a front end chosen on one half is judged on the other
HALVES = {
    "lmdeploy": lambda p: "2,048 in" in p.setup,
    "vllm": lambda p: p.setup.startswith("1 QPS"),
}


def frontend() -> None:
    grid = {
        (request, token): calibration.frontend_ttft(request, token)
        for request in calibration.FRONTEND_REQUEST
        for token in calibration.FRONTEND_TOKEN
    }
    print(f"{'per request':>12} {'per token':>10}  mean |TTFT error|: lmdeploy   vLLM gist")
    for (request, token), points in grid.items():
        lmdeploy, vllm = mean_error(points["lmdeploy"]), mean_error(points["vllm"])
        print(f"{request * 1e3:>9.0f} ms {token * 1e6:>7.0f} µs  {lmdeploy:>26.1%} {vllm:>11.1%}")
    for source, half in HALVES.items():
        for chosen_on in (True, False):
            rows = {
                key: ([p for p in points[source] if half(p) == chosen_on],
                      [p for p in points[source] if half(p) != chosen_on])
                for key, points in grid.items()
            }  # fmt: skip
            best = min(grid, key=lambda key: mean_error(rows[key][0]))
            print(
                f"{source}: chosen on {'the first' if chosen_on else 'the second'} half: "
                f"{best[0] * 1e3:g} ms + {best[1] * 1e6:g} µs/token; the other half's error "
                f"{mean_error(rows[best][1]):.1%} against {mean_error(rows[(0.0, 0.0)][1]):.1%} "
                "without"
            )


if __name__ == "__main__":
    frontend() if "--frontend" in sys.argv[1:] else main()
