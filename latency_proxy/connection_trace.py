"""What the pool did with one upstream request: did it wait for a slot, and was its
connection one used before?

Both answers change what a failure means. aiohttp counts the wait for a pool slot and the
TCP connect against one timeout and raises the same error for both; but a request that
never got a connection is the proxy's queue at --pool-max-connections, not a slow upstream
(upstream_call.py: 503 + Retry-After, `rejected`, `pool_timeout`; never `upstream_timeout`).
And a request that failed on a *reused* connection before any answer came found a socket
the upstream had closed while it sat idle, not a refusal of the request: upstream.py sends
it once more on a fresh connection. The request's aiohttp trace context records both.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp


class ConnectionTrace:
    """One request's trace context (aiohttp's trace_request_ctx)."""

    __slots__ = ("reused", "waiting")

    def __init__(self) -> None:
        self.waiting = False  # True while it waits for a free pooled connection
        self.reused = False  # the pool gave it a connection used before


def _trace(context: SimpleNamespace) -> ConnectionTrace | None:
    found = context.trace_request_ctx
    return found if isinstance(found, ConnectionTrace) else None  # None: e.g. a listing


async def _queued(session: Any, context: SimpleNamespace, params: Any) -> None:
    if (trace := _trace(context)) is not None:
        trace.waiting = True


async def _dequeued(session: Any, context: SimpleNamespace, params: Any) -> None:
    if (trace := _trace(context)) is not None:
        trace.waiting = False


async def _reused(session: Any, context: SimpleNamespace, params: Any) -> None:
    if (trace := _trace(context)) is not None:
        trace.reused = True


def tracing() -> aiohttp.TraceConfig:
    """The trace config a route's pooled session needs to keep ConnectionTrace up to date."""
    config = aiohttp.TraceConfig()
    config.on_connection_queued_start.append(_queued)
    config.on_connection_queued_end.append(_dequeued)
    config.on_connection_reuseconn.append(_reused)
    return config
