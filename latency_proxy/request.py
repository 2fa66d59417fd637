"""What the proxy reads of the client's request: a header, and the body whole within a
size limit (the proxy routes by what the body says)."""

from __future__ import annotations

from latency_proxy.types import Receive, Scope


class BodyTooLarge(Exception):
    """Declared or received beyond the limit: answered 413 without reading the rest."""


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header `name` (lowercase), or None."""
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None


async def read_body(receive: Receive, limit: int, declared: int | None) -> bytes:
    if declared is not None and declared > limit:
        raise BodyTooLarge
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
