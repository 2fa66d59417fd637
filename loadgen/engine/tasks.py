"""Running a block's coroutines until its budget says it is over, and cancelling the rest
without losing what failed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


async def run_until(
    event: asyncio.Event,
    coros: list[Coroutine[Any, Any, None]],
    before_cancel: Coroutine[Any, Any, None],
) -> None:
    """Run coroutines (which end only once the event is set, or by failing) until the event
    is set; then await before_cancel, cancel what is left and raise what failed."""
    tasks = {asyncio.create_task(c) for c in coros}
    waiter = asyncio.create_task(event.wait())
    try:
        await asyncio.wait({waiter, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        if event.is_set():
            await before_cancel
    finally:
        before_cancel.close()  # a no-op once awaited; an un-awaited coroutine must not warn
        await cancel({waiter, *tasks})


async def cancel(tasks: set[asyncio.Task[Any]]) -> None:
    pending = list(tasks)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*pending, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result
