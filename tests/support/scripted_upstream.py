"""A scripted OpenAI-style upstream with exactly known timing and faults on demand.

Each request carries its script in the `x-script` header (JSON), so one server serves
every test; the server records what it received and when clients went away.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn

FINGERPRINT = "scripted-fp-1"


@dataclass
class Script:
    ttft: float = 0.0  # delay before the first content chunk (after the role chunk)
    itl: float = 0.0  # delay between content chunks
    tokens: int = 5  # output tokens
    per_chunk: int = 1  # tokens per content chunk
    role_first: bool = True
    headers_delay: float = 0.0  # delay before the response starts
    status: int = 200
    error_body: str | None = None
    die_after: int | None = None  # content chunks before the connection is cut
    hang_after: int | None = None  # content chunks before the stream goes silent
    done: bool = True
    empty_text_every: int = 0  # every k-th token arrives as an empty-text chunk (partial UTF-8)
    text: str = "tok "  # the text of each output token


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    t: float


@dataclass
class Upstream:
    received: list[Received] = field(default_factory=list)
    disconnects: list[tuple[str, float]] = field(default_factory=list)  # (request id, time)
    completed: list[str] = field(default_factory=list)
    url: str = ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append(
            Received(scope["method"], scope["path"], headers, body, time.perf_counter())
        )
        script = Script(**json.loads(headers.get("x-script", "{}")))
        request_id = headers.get("x-request-id", "")
        path = scope["path"]
        watcher = asyncio.create_task(self._watch(receive, request_id, asyncio.current_task()))
        try:
            if path == "/v1/models":
                await _json(
                    send,
                    200,
                    {
                        "object": "list",
                        "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}],
                    },
                )
            elif path in ("/v1/chat/completions", "/v1/completions"):
                await self._complete(script, path, body, headers, send)
            else:
                await _json(
                    send,
                    200,
                    {
                        "path": path,
                        "method": scope["method"],
                        "query": scope["query_string"].decode(),
                    },
                    [(b"x-upstream-unknown", b"kept")],
                )
            self.completed.append(request_id)
        except asyncio.CancelledError:
            return
        finally:
            watcher.cancel()

    async def _watch(self, receive: Any, request_id: str, task: Any) -> None:
        """uvicorn does not cancel an app whose client left: notice it, like vLLM does."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnects.append((request_id, time.perf_counter()))
        task.cancel()

    async def _complete(
        self, script: Script, path: str, body: bytes, headers: dict[str, str], send: Any
    ) -> None:
        if script.headers_delay:
            await asyncio.sleep(script.headers_delay)
        if script.status != 200:
            error = script.error_body or json.dumps(
                {"error": {"message": "scripted", "code": script.status}}
            )
            await _json(send, script.status, json.loads(error))
            return
        try:
            request = orjson.loads(body)
            if not isinstance(request, dict) or not isinstance(
                request.get("stream_options") or {}, dict
            ):
                raise orjson.JSONDecodeError("not an object", "", 0)
        except orjson.JSONDecodeError:
            await _json(
                send,
                400,
                {"error": {"message": "bad json", "type": "BadRequestError", "code": 400}},
            )
            return
        chat = path.endswith("chat/completions")
        if not request.get("stream"):
            await asyncio.sleep(script.ttft + script.itl * max(script.tokens - 1, 0))
            text = script.text * script.tokens
            choice = (
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            await _json(
                send,
                200,
                {
                    "id": "cmpl-1",
                    "object": "chat.completion",
                    "model": request.get("model"),
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": 7,
                        "completion_tokens": script.tokens,
                        "total_tokens": 7 + script.tokens,
                    },
                },
            )
            return
        options = request.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"x-upstream-unknown", b"kept"),
                    (b"x-request-id", headers.get("x-request-id", "").encode()),
                ],
            }
        )
        base = {
            "id": "chatcmpl-" + headers.get("x-request-id", "x"),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1,
            "model": request.get("model"),
        }

        def usage(tokens: int) -> dict[str, int]:
            return {"prompt_tokens": 7, "total_tokens": 7 + tokens, "completion_tokens": tokens}

        async def event(payload: dict[str, Any]) -> None:
            data = b"data: " + orjson.dumps(payload) + b"\n\n"
            await send({"type": "http.response.body", "body": data, "more_body": True})

        if chat and script.role_first:
            chunk = {
                **base,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            }
            if continuous:
                chunk["usage"] = usage(0)
            await event(chunk)
        produced = 0
        chunks = 0
        delay = script.ttft
        while produced < script.tokens:
            await asyncio.sleep(delay)
            delay = script.itl
            n = min(script.per_chunk, script.tokens - produced)
            produced += n
            chunks += 1
            text = (
                ""
                if script.empty_text_every and chunks % script.empty_text_every == 0
                else script.text * n
            )
            last = produced == script.tokens
            finish = "length" if last else None
            choice = (
                {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                if chat
                else {"index": 0, "text": text, "finish_reason": finish}
            )
            chunk = {**base, "choices": [choice]}
            if continuous:
                chunk["usage"] = usage(produced)
            if last and not include_usage:
                chunk["system_fingerprint"] = FINGERPRINT  # vLLM: on the stream's last chunk
            await event(chunk)
            if script.die_after is not None and chunks >= script.die_after:
                raise RuntimeError("scripted upstream death")
            if script.hang_after is not None and chunks >= script.hang_after:
                await asyncio.sleep(3600)
        if include_usage:
            last_chunk = {**base, "choices": [], "usage": usage(produced)}
            await event({**last_chunk, "system_fingerprint": FINGERPRINT})
        if script.done:
            await send(
                {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _json(
    send: Any, status: int, payload: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ServerThread:
    """Runs an ASGI app under uvicorn on a loopback port in a background thread."""

    def __init__(self, app: Any, port: int, **tls: str) -> None:
        self.config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="critical",
            lifespan="on",
            loop="asyncio",
            http="httptools",
            **tls,
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("upstream did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
