"""An upstream that answers with exactly the bytes a test hands it.

The scripted simulator (scripted_upstream.py) speaks vLLM's wire format, faults included;
some tests need what no model server should send — events that are valid JSON but not
chunks, counts past any range, a compressed event stream — or an answer held open until the
test lets it go. This app serves those, keyed by the request's X-Request-Id, and says which
requests reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from loadgen.stack.processes import free_port
from tests.support.scripted_upstream import ServerThread

EVENT_STREAM = [(b"content-type", b"text/event-stream")]


async def lifespan(receive, send) -> None:
    """An ASGI app's lifespan: nothing to start or stop."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


@dataclass
class Answer:
    chunks: list[bytes]
    headers: list[tuple[bytes, bytes]] = field(default_factory=lambda: list(EVENT_STREAM))
    status: int = 200
    hold: threading.Event | None = None  # the answer starts once the test sets it


class CannedUpstream:
    """An ASGI app: each request gets the Answer filed under its X-Request-Id, /health and
    anything else unknown a plain 200."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.arrived: list[tuple[str, str]] = []  # (path, X-Request-Id) in arrival order
        self.url = ""

    def arrived_ids(self) -> set[str]:
        return {request_id for _, request_id in self.arrived}

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        while (await receive()).get("more_body", False):
            pass
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode()
        self.arrived.append((scope["path"], request_id))
        answer = self.answers.get(
            request_id, Answer([b"{}"], [(b"content-type", b"application/json")])
        )
        if answer.hold is not None:
            await asyncio.to_thread(answer.hold.wait, 30)
        await send(
            {"type": "http.response.start", "status": answer.status, "headers": answer.headers}
        )
        for chunk in answer.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@contextlib.contextmanager
def serve() -> Iterator[CannedUpstream]:
    app = CannedUpstream()
    port = free_port()
    with ServerThread(app, port):
        app.url = f"http://127.0.0.1:{port}"
        yield app
