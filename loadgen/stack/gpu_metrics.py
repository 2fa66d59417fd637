"""GPU memory and power during a run, scraped from a DCGM exporter's (or the simulator's) /metrics.

Three fields are read: DCGM_FI_DEV_FB_USED (MiB of framebuffer in use),
DCGM_FI_DEV_POWER_USAGE (watts) and DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since boot, a
counter: exact energy between two samples), one series per `gpu` label. Parsing is pure;
the sampler is the I/O edge and never fails the run: an unreachable exporter leaves a gap.
"""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp

from loadgen.analysis.records import GpuSample
from loadgen.engine.measurement import Clock

MEMORY = "DCGM_FI_DEV_FB_USED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
_LINE = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s+(\S+)")
_GPU_LABEL = re.compile(r'\bgpu="([^"]*)"')


def parse(text: str, source: str, at: float) -> list[GpuSample]:
    """One sample per GPU found in a Prometheus text exposition."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or match.group(1) not in (MEMORY, POWER, ENERGY):
            continue
        label = _GPU_LABEL.search(match.group(2) or "")
        gpu = label.group(1) if label else "0"
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        found.setdefault(gpu, {})[match.group(1)] = value
    return [
        GpuSample(
            at=at,
            source=source,
            gpu=gpu,
            memory_mib=values.get(MEMORY),
            power_w=values.get(POWER),
            energy_mj=values.get(ENERGY),
        )
        for gpu, values in sorted(found.items())
    ]


async def sample(urls: list[str], interval_s: float, clock: Clock, into: list[GpuSample]) -> None:
    """Scrape every URL each interval until cancelled."""
    timeout = aiohttp.ClientTimeout(total=max(1.0, interval_s))
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while True:
            for url in urls:
                try:
                    async with http.get(url) as resp:
                        text = await resp.text()
                except (TimeoutError, aiohttp.ClientError):
                    continue
                into.extend(parse(text, url, clock.epoch(time.perf_counter())))
            await asyncio.sleep(interval_s)
