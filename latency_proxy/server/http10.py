"""An HTTP/1.0 request's response, framed as a 1.0 client reads it.

uvicorn's httptools protocol chunks every body whose length the app does not declare, and
a 1.0 client knows no transfer coding: it would keep the chunk sizes as body. RFC 9112
§7.1 forbids chunked to a 1.0 recipient; a body of unknown length is then delimited by
closing the connection (§6.3), as nginx does (it chunks only for 1.1). A declared length is
kept, and a 1.0 connection is never kept alive (uvicorn's rule; nginx keeps one alive only
when asked and the length is known), so `connection: close` says where the body ends.
"""

from __future__ import annotations

from typing import Any

from latency_proxy.server.uvicorn_internals import RequestResponseCycle


class Http10Cycle(RequestResponseCycle):
    """uvicorn's cycle, but a body of unknown length goes out as it is, unframed."""

    close_delimited = False  # set once the head said no length

    async def send(self, message: Any) -> None:
        kind = message["type"]
        if kind == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _ in message.get("headers", ())}
            if b"content-length" not in names and self.scope["method"] != "HEAD":
                self.chunked_encoding = False  # uvicorn then adds no transfer-encoding
                self.close_delimited = True
        elif kind == "http.response.body" and self.close_delimited and not self.response_complete:
            body = message.get("body", b"")
            if body:
                if self.flow.write_paused and not self.disconnected:
                    await self.flow.drain()
                if not self.disconnected:
                    self.transport.write(body)
            message = {"type": kind, "body": b"", "more_body": message.get("more_body", False)}
        await super().send(message)
