"""ASGI responses that stop generating when the client goes away.

A real server aborts a request whose client disconnected and frees its batch slot; the
simulator must too, for streamed and non-streamed requests alike. Each response watches
`receive()` for `http.disconnect` in one helper task and cancels the generation when it
comes; the generation's own cleanup (closing its async iterator) then frees the slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

Headers = list[tuple[bytes, bytes]]


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _run_or_abandon(receive: Receive, work: Awaitable[None]) -> None:
    """Run `work` unless the client disconnects first (then cancel it quietly)."""
    task = asyncio.current_task()
    assert task is not None

    async def watch() -> None:
        await _until_disconnect(receive)
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        await work
    except asyncio.CancelledError:
        if not watcher.done() or watcher.cancelled():
            raise
        task.uncancel()
    finally:
        watcher.cancel()


class EventStream:
    """text/event-stream from an async iterator of ready-made SSE bytes."""

    def __init__(self, events: AsyncIterator[bytes], headers: Headers) -> None:
        self._events = events
        # vLLM's StreamingResponse: no cache-control
        self._headers = [(b"content-type", b"text/event-stream; charset=utf-8"), *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await _run_or_abandon(receive, self._stream(send))
        finally:
            await self._events.aclose()  # type: ignore[attr-defined]

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        async for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class DeferredJSON:
    """A JSON body that takes time to compute (a non-streamed generation)."""

    def __init__(self, compute: Callable[[], Awaitable[Any]], headers: Headers) -> None:
        self._compute = compute
        self._headers = [(b"content-type", b"application/json"), *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _run_or_abandon(receive, self._respond(send))

    async def _respond(self, send: Send) -> None:
        body = orjson.dumps(await self._compute())
        headers = [*self._headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
