"""What a run's throughput costs in money and energy. Pure, no I/O.

Money: the GPUs' hourly price over the tokens they served. The figure people quote, $ per
million output tokens, is the whole hour over the output tokens. Apart from it, under names
of their own, the hour split between input and output tokens by time: input tokens carry
the share of request time spent before the first token (sum of TTFT over sum of E2E:
prefill, and any queueing before it), output tokens the rest; those two prices add up to the
whole cost. The split is no price to quote: a server that delivers its answer in one burst
spends nearly all the time before its first token, and the split makes its output free.

Energy: the GPUs' mean power over the target's busy time. With dcgm-exporter's energy
counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, which the simulator serves too) it is exact:
joules between the first and last sample over the time between them, per GPU; otherwise it
is the mean of the sampled power gauges. Joules per output token is that power over the
time the measured requests ran, over their output tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from loadgen.analysis.records import GpuSample

SPLIT_RULE = "input tokens carry the share of request time before the first token"


def cost(
    usd_per_gpu_hour: float,
    gpus: int,
    input_tokens_per_s: float | None,
    output_tokens_per_s: float | None,
    input_time_share: float | None,
) -> dict[str, Any] | None:
    """targets.<name>.cost; None without throughput to spread the price over."""
    if not output_tokens_per_s or input_time_share is None:
        return None
    usd_per_s = usd_per_gpu_hour * gpus / 3600
    per_input = (
        usd_per_s * input_time_share / input_tokens_per_s * 1e6 if input_tokens_per_s else None
    )
    return {
        "usd_per_hour": usd_per_gpu_hour * gpus,
        "usd_per_mtok_output": usd_per_s / output_tokens_per_s * 1e6,
        "usd_per_mtok_output_split": usd_per_s * (1 - input_time_share) / output_tokens_per_s * 1e6,
        "usd_per_mtok_input_split": per_input,
        "input_time_share": input_time_share,
        "split": SPLIT_RULE,
    }


def mean_power(samples: Sequence[GpuSample]) -> tuple[float, str] | None:
    """All GPUs' mean power in W, summed, and what it came from; None without samples."""
    by_gpu: dict[tuple[str, str], list[GpuSample]] = defaultdict(list)
    for s in samples:
        by_gpu[(s.source, s.gpu)].append(s)
    total, sources = 0.0, set()
    for series in by_gpu.values():
        counted = [s for s in series if s.energy_mj is not None]
        if len(counted) >= 2 and counted[-1].at > counted[0].at:
            assert counted[0].energy_mj is not None and counted[-1].energy_mj is not None
            joules = (counted[-1].energy_mj - counted[0].energy_mj) / 1000
            total += joules / (counted[-1].at - counted[0].at)
            sources.add("energy counter")
            continue
        gauges = [s.power_w for s in series if s.power_w is not None]
        if gauges:
            total += sum(gauges) / len(gauges)
            sources.add("power gauge")
    if not sources:
        return None
    return total, " and ".join(sorted(sources))


def energy(
    samples: Sequence[GpuSample],
    busy_s: float,
    output_tokens: int,
    goodput_per_s: float | None,
) -> dict[str, Any] | None:
    """targets.<name>.energy: the mean power over the time the measured requests ran (first
    due to last finished, `busy_s`), times that time, over their output tokens. None without
    power samples or output tokens."""
    power = mean_power(samples)
    if power is None or power[0] <= 0 or not output_tokens or busy_s <= 0:
        return None
    watts, source = power
    joules = watts * busy_s
    return {
        "mean_power_w": watts,
        "joules_per_output_token": joules / output_tokens,
        "output_tokens_per_joule": output_tokens / joules,
        "goodput_per_watt": None if goodput_per_s is None else goodput_per_s / watts,
        "source": source,
    }
