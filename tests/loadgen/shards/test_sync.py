"""--sync-dir: shards that become ready at different times start their load together."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from loadgen.shards import sync


def test_shards_ready_apart_start_at_one_moment(tmp_path: Path) -> None:
    async def shard(index: int, ready_after: float) -> tuple[float, float]:
        await asyncio.sleep(ready_after)
        start = await sync.start_together(tmp_path, index, 3, timeout_s=10)
        return start, time.time()

    async def go() -> list[tuple[float, float]]:
        return await asyncio.gather(shard(0, 0.0), shard(1, 0.4), shard(2, 0.8))

    began = time.time()
    results = asyncio.run(go())
    starts = {start for start, _ in results}
    assert len(starts) == 1  # one moment, computed alike by every shard
    (start,) = starts
    assert began + 0.8 + sync.MARGIN_S <= start < began + 0.8 + sync.MARGIN_S + 0.5
    for _, woke in results:
        assert start - 0.005 <= woke < start + 0.25  # each slept until then, not longer


def test_an_earlier_runs_files_do_not_count(tmp_path: Path) -> None:
    (tmp_path / "shard-1.ready").write_text(repr(time.time() - 3600))
    with pytest.raises(RuntimeError, match=r"1 of 2 shards ready after 0.3 s"):
        asyncio.run(sync.start_together(tmp_path, 0, 2, timeout_s=0.3))
    assert sync.ready_times(tmp_path, 2, since=time.time() - 60) == [
        float((tmp_path / "shard-0.ready").read_text())
    ]
