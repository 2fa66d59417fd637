"""What the proxy reads of the client's request: a header, and the body whole within a
size limit and a time limit (the proxy routes by what the body says)."""

from __future__ import annotations

import asyncio

from latency_proxy.types import Receive, Scope


class BodyTooLarge(Exception):
    """Declared or received beyond the limit: answered 413 without reading the rest."""


class BodyTooSlow(Exception):
    """Not complete within the body timeout (trickled, or declared and never sent): 408."""


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header `name` (lowercase), or None."""
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None


async def read_body(receive: Receive, limit: int, declared: int | None, timeout: float) -> bytes:
    """The whole body, within `limit` bytes and `timeout` seconds of the call (the end of
    the head): a deadline for the whole body, not for each read, so a trickle is cut too."""
    if declared is not None and declared > limit:
        raise BodyTooLarge
    try:
        async with asyncio.timeout(timeout):
            return await _read(receive, limit)
    except TimeoutError:
        raise BodyTooSlow from None


async def _read(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)
