"""What the proxy reads of the client's request: a few headers, and the body whole within a
size limit and a time limit (the proxy routes by what the body says)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from latency_proxy.base.asgi import Receive


class BodyTooLarge(Exception):
    """Declared or received beyond the limit: answered 413 without reading the rest."""


class BodyTooSlow(Exception):
    """Not complete within the body timeout (trickled, or declared and never sent): 408."""


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


# the headers whose first value the proxy reads (request id, trace context, body length,
# the caller's agent session)
SESSION_HEADER = b"x-session-id"
_READ = frozenset(
    {b"x-request-id", b"traceparent", b"tracestate", b"content-length", SESSION_HEADER}
)


@dataclass(slots=True)
class Head:
    """What the proxy reads of a request's headers, taken in one pass over them."""

    first: dict[bytes, bytes]  # the first value of each header in _READ that is present
    hosts: int  # Host lines
    size: int  # bytes of every name and value


def read_head(headers: Iterable[tuple[bytes, bytes]]) -> Head:
    first: dict[bytes, bytes] = {}
    hosts = size = 0
    for name, value in headers:
        size += len(name) + len(value)
        if name == b"host":
            hosts += 1
            continue
        lower = name.lower()
        if lower in _READ and lower not in first:
            first[lower] = value
    return Head(first, hosts, size)


async def read_body(
    receive: Receive,
    limit: int,
    declared: int | None,
    timeout: float,
    at_hand: Callable[[], bytes | None] | None = None,
) -> bytes:
    """The whole body, within `limit` bytes and `timeout` seconds of the call (the end of
    the head): a deadline for the whole body, not for each read, so a trickle is cut too.

    `at_hand` (the server's BODY_AT_HAND) gives a body that arrived whole with the head,
    the usual small request: nothing is left to wait for, so no deadline is armed."""
    if declared is not None and declared > limit:
        raise BodyTooLarge
    body = at_hand() if at_hand is not None else None
    if body is not None:
        if len(body) > limit:
            raise BodyTooLarge
        return body
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
