"""Waiting for a point on the schedule.

The simulator keeps absolute schedules (time.monotonic()), so lateness never accumulates. An
event loop's timers are coarse (1 ms) and may run on a cached clock, so a wake-up can come
early as well as late: sleep again until the deadline has really passed.
"""

from __future__ import annotations

import asyncio
import time


async def sleep_until(deadline: float) -> float:
    """Return time.monotonic() once it has reached `deadline`."""
    while (now := time.monotonic()) < deadline:
        await asyncio.sleep(deadline - now)
    return now
