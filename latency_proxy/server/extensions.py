"""What the client side offers the app beyond ASGI, named once: the scope extensions its
connections fill in, and the OpenAI-style error body its own refusals share with the app's."""

from __future__ import annotations

import orjson

# the scope extension that calls back once the client is gone: the disconnect watch without
# a task per request
ON_GONE = "latency_proxy.on_gone"
# the scope extension that hands over a body already received whole with the head
BODY_AT_HAND = "latency_proxy.body_at_hand"
# message and type of the 431, whether the head was refused as it arrived or once complete
HEADERS_TOO_LARGE = ("request headers too many or too large", "RequestHeaderFieldsTooLarge")


def error_body(status: int, message: str, kind: str, param: str | None = None) -> bytes:
    """An OpenAI-style error object, so a client sees one shape whoever refused it."""
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}
    )
