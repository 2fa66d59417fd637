"""The proxy's own answers (as opposed to the upstream's, which are relayed): OpenAI-style
JSON, so a client sees the same error shape whoever refused it."""

from __future__ import annotations

from latency_proxy.base.asgi import Send
from latency_proxy.record.exchange import Exchange
from latency_proxy.server.extensions import ApiError

Headers = list[tuple[bytes, bytes]]


async def send_json(
    send: Send, status: int, body: bytes, request_id: str, extra: Headers | None = None
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def answer(
    exchange: Exchange, send: Send, status: int, body: bytes, extra: Headers | None = None
) -> None:
    """Send a JSON answer of the proxy's own and note its status and size on the exchange."""
    exchange.responded(status)
    exchange.sent(len(body))
    await send_json(send, status, body, exchange.request_id, extra)


def retry_after_header(seconds: float) -> Headers:
    """The Retry-After header of a 503: whole seconds, at least one."""
    return [(b"retry-after", str(max(1, round(seconds))).encode())]


async def answer_error(
    exchange: Exchange, send: Send, error: ApiError, extra: Headers | None = None
) -> None:
    await answer(exchange, send, error.status, error.body(), extra)
