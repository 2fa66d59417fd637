"""The servers' own metrics around each block's measured window: scraped when it opens and
as it closes (while the cooldown still holds the load), kept as their difference."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from loadgen.analysis import server_metrics
from loadgen.analysis.server_metrics import ServerWindow, Snapshot
from loadgen.engine.budget import Budget
from loadgen.engine.measurement import Clock
from loadgen.engine.schedule import Block


@dataclass(slots=True)
class ServerWindows:
    urls: tuple[str, ...]  # Prometheus /metrics endpoints (vLLM's, the proxy's admin port)
    clock: Clock
    windows: list[ServerWindow]  # where each block's difference goes

    async def scrape(self) -> list[Snapshot]:
        return await server_metrics.scrape(self.urls, self.clock.epoch(time.perf_counter()))

    def when_open(self, budget: Budget) -> asyncio.Task[list[Snapshot]]:
        """Scrape the servers when the block's measured window opens (after its warmup)."""

        async def later() -> list[Snapshot]:
            await budget.opened.wait()
            return await self.scrape()

        return asyncio.create_task(later())

    async def closing(self, budget: Budget) -> None:
        """The window's closing scrape: once the last measured request finished, while the
        cooldown requests still hold the load, so the gauges read the level, not a drain."""
        if self.urls:
            budget.closing = await self.scrape()

    async def close(
        self,
        block: Block,
        opening: asyncio.Task[list[Snapshot]],
        closing: list[Snapshot],
        level: float | None,
    ) -> None:
        """Keep the difference of the two scrapes for each endpoint read both times. A block
        cut short before its window opened has none."""
        if not opening.done():
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            return
        opened = {s.source: s for s in opening.result()}
        for closed in closing:
            if closed.source in opened:
                self.windows.append(
                    server_metrics.difference(
                        opened[closed.source],
                        closed,
                        target=block.target,
                        block=block.index,
                        level=level,
                    )
                )


def in_flight(snapshots: list[Snapshot]) -> float | None:
    """vLLM's running + waiting requests, over the endpoints that export them."""
    counts = [
        sum(s.scalars[name] for name in server_metrics.GAUGES.values() if name in s.scalars)
        for s in snapshots
        if any(name in s.scalars for name in server_metrics.GAUGES.values())
    ]
    return sum(counts) if counts else None
