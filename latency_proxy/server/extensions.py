"""What the client side offers the app beyond ASGI, named once: the scope extensions its
connections fill in, and the OpenAI-style error its own refusals share with the app's."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

# the scope extension that calls back once the client is gone: the disconnect watch without
# a task per request
ON_GONE = "latency_proxy.on_gone"
# the scope extension that hands over a body already received whole with the head
BODY_AT_HAND = "latency_proxy.body_at_hand"


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error the proxy answers itself: one value from where it is decided to the body."""

    status: int
    message: str
    kind: str  # the OpenAI error type
    param: str | None = None

    def body(self) -> bytes:
        """An OpenAI-style error object, so a client sees one shape whoever refused it."""
        error = {"message": self.message, "type": self.kind, "param": self.param}
        return orjson.dumps({"error": {**error, "code": self.status}})


# the 431, whether the head was refused as it arrived or once complete
HEADERS_TOO_LARGE = ApiError(
    431, "request headers too many or too large", "RequestHeaderFieldsTooLarge"
)
