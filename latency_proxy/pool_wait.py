"""Which requests waited for a free pooled connection to their route.

aiohttp counts the wait for a pool slot and the TCP connect against one timeout and raises
the same error for both; but a request that never got a connection is the proxy's queue at
--pool-max-connections, not a slow upstream. Its request trace marks the wait, so the
upstream call can tell the two apart (upstream_call.py: 503 + Retry-After, `rejected`,
`pool_timeout`; never `upstream_timeout`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp


class PoolWait:
    """One request's trace context: True while it waits for a connection."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting = False


async def _queued(session: Any, context: SimpleNamespace, params: Any) -> None:
    if isinstance(context.trace_request_ctx, PoolWait):
        context.trace_request_ctx.waiting = True


async def _dequeued(session: Any, context: SimpleNamespace, params: Any) -> None:
    if isinstance(context.trace_request_ctx, PoolWait):
        context.trace_request_ctx.waiting = False


def tracing() -> aiohttp.TraceConfig:
    """The trace config a route's session needs for PoolWait to be kept up to date."""
    config = aiohttp.TraceConfig()
    config.on_connection_queued_start.append(_queued)
    config.on_connection_queued_end.append(_dequeued)
    return config
