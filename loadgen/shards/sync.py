"""--sync-dir: the shards of one run start their load at the same moment.

Pods of an Indexed Job (or --workers processes) become ready at different times: image
pulls, prompt calibration. Started as they come, their A/B blocks would not line up and the
first shard would measure a lighter load than asked for. So each shard, once ready to send,
writes its wall-clock time to `shard-<i>.ready` in a directory all of them see (the Job's
shared volume) and waits until all N are there; each then starts at the latest of those
times plus a margin: the same moment, computed alike from the same files.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

MARGIN_S = 2.0  # room for the last shard to read the files too
POLL_S = 0.2


def ready_times(directory: Path, shards: int, since: float) -> list[float]:
    """The ready times of this run's shards so far; older files are an earlier run's."""
    times = []
    for index in range(shards):
        try:
            at = float((directory / f"shard-{index}.ready").read_text())
        except (FileNotFoundError, ValueError):
            continue
        if at >= since:
            times.append(at)
    return times


async def start_together(directory: Path, shard: int, shards: int, timeout_s: float) -> float:
    """Announce this shard, wait for all, sleep until the common start; returns it (epoch)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = time.time()
    mine = directory / f"shard-{shard}.ready"
    partial = mine.with_suffix(".partial")
    partial.write_text(repr(now))
    partial.replace(mine)  # atomic: a reader never sees half a number
    deadline = time.monotonic() + timeout_s
    while len(times := ready_times(directory, shards, now - timeout_s)) < shards:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"--sync-dir {directory}: {len(times)} of {shards} shards ready "
                f"after {timeout_s:g} s"
            )
        await asyncio.sleep(POLL_S)
    start = max(times) + MARGIN_S
    await asyncio.sleep(max(0.0, start - time.time()))
    return start
