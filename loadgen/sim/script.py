"""Scripted mode: fixed timing that plays a script per request, injects faults on demand and
records what it received. For tests; off unless asked for.

The proxy's and the load generator's tests need an upstream whose every answer is known in
advance, faults included, and that can say what reached it. Rather than a fake of their own,
they run the simulator in fixed timing with a script (`python -m loadgen.sim --ttft 0 --itl 0
--script '{"tokens": 5}'`, or `create_app(ttft=…, itl=…, script={…})`), so what they test
against speaks vLLM's wire format. Without `--script` none of this exists: no header is
read, nothing is recorded, no extra route answers.

A request's script is the server's (its `--script`, changed by `POST /control`) overlaid
with the request's `x-script` header, a JSON object (as llm-d-inference-sim injects failures
per request). Its fields (`Script`):

    ttft, itl         seconds to the first content chunk, then between chunks (default: the
                      server's --ttft/--itl)
    tokens            output tokens whatever max_tokens asks, finish_reason "length"
    per_chunk         tokens in every chunk, the first included (vLLM's first is one token)
    text              the text of every output token (default: the simulator's words)
    prompt_tokens     the prompt_tokens usage reports (default: as counted)
    tokenizer         "words" (the simulator's rule) or "subwords" (tokenizer.SUBWORDS)
    headers           extra response headers
    headers_delay     seconds before the response starts
    status            answer with this status instead, and `error_body` (JSON text; default
                      a vLLM-shaped error)
    die_after         content chunks before the connection is cut, the stream unterminated
    hang_after        content chunks before the stream goes silent (until the client leaves)

`POST /control` also takes, for the whole server (`Control`): `stall_at`, `stall_s` (the
stall_at-th generation request, from 1, freezes the whole server for stall_s seconds) and
`fail_every`, `fail_status` (every fail_every-th generation request answers fail_status).
`GET /arrivals` lists the generation requests so far as `{"at": epoch seconds, "id":
X-Request-Id}`; in-process, `Scripting.received` and `.disconnects` hold every request and
every client that went away.

A scripted server answers to any model name, in its answers the request's (a test routes
many names to one upstream); an unknown model is a scripted `status: 404`. It is
reproducible: nothing is random, and `created` is the server's start time, so the same
script gives the same bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loadgen.sim.errors import ApiError
from loadgen.sim.tokenizer import TOKENIZERS, Tokenizer

SCRIPT_HEADER = "x-script"
SCOPE_KEY = "loadgen.sim.script"  # where the app finds a request's script
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")


class ScriptedDeath(Exception):
    """Raised mid-stream on `die_after`: the server drops the connection, as a crash would."""


@dataclass(frozen=True, slots=True)
class Script:
    ttft: float | None = None
    itl: float | None = None
    tokens: int | None = None
    per_chunk: int = 1
    text: str | None = None
    prompt_tokens: int | None = None
    tokenizer: str = "words"
    headers: dict[str, str] = field(default_factory=dict)
    headers_delay: float = 0.0
    status: int = 200
    error_body: str | None = None
    die_after: int | None = None
    hang_after: int | None = None

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {sorted(TOKENIZERS)}")
        if self.per_chunk < 1:
            raise ValueError("per_chunk must be ≥ 1")

    @property
    def rules(self) -> Tokenizer:
        return TOKENIZERS[self.tokenizer]

    def pace(self) -> tuple[float | None, float | None]:
        """(ttft, itl per token) for fixed timing: `itl` is between chunks, so a chunk of
        `per_chunk` tokens spreads it over its tokens."""
        return self.ttft, None if self.itl is None else self.itl / self.per_chunk

    def error(self) -> tuple[int, Any]:
        """The scripted error's status and body."""
        if self.error_body is not None:
            return self.status, json.loads(self.error_body)
        return self.status, ApiError(self.status, "scripted failure").body()

    async def after_chunk(self, chunks: int) -> None:
        """The faults due once `chunks` content chunks are out."""
        if self.die_after is not None and chunks >= self.die_after:
            raise ScriptedDeath(f"scripted death after {chunks} chunks")
        if self.hang_after is not None and chunks >= self.hang_after:
            await asyncio.Event().wait()  # until the client goes away


@dataclass(frozen=True, slots=True)
class Control:
    """The whole server's faults, counted over its generation requests."""

    stall_at: int = 0
    stall_s: float = 1.0
    fail_every: int = 0
    fail_status: int = 500


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    t: float  # time.perf_counter() at arrival
    at: float  # time.time() at arrival


def overlay(base: Any, fields: Any) -> Any:
    """`base` with `fields` (a JSON object) replacing its own; ValueError for anything else."""
    if not isinstance(fields, dict):
        raise ValueError("a script is a JSON object")
    try:
        return dataclasses.replace(base, **fields)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


class Scripting:
    """A scripted server's state: the script, the faults, and what it received."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.script = overlay(Script(), script)
        self.control = Control()
        self.received: list[Received] = []
        self.disconnects: list[tuple[str, float]] = []  # (X-Request-Id, perf_counter time)
        self.generations = 0

    def update(self, fields: dict[str, Any]) -> dict[str, Any]:
        """POST /control: Control's fields for the server, the rest for later scripts."""
        if not isinstance(fields, dict):
            raise ValueError("a script is a JSON object")
        names = {f.name for f in dataclasses.fields(Control)}
        control = overlay(self.control, {k: v for k, v in fields.items() if k in names})
        self.script = overlay(self.script, {k: v for k, v in fields.items() if k not in names})
        self.control = control
        return {**dataclasses.asdict(self.script), **dataclasses.asdict(control)}

    def arrivals(self) -> list[dict[str, Any]]:
        return [
            {"at": r.at, "id": r.headers.get("x-request-id")}
            for r in self.received
            if r.path in GENERATION_PATHS
        ]

    def fault(self) -> tuple[int, Any] | None:
        """The server's faults for the next generation request: a stall, or its failure."""
        self.generations += 1
        control = self.control
        if self.generations == control.stall_at:
            time.sleep(control.stall_s)  # blocks the event loop: the whole server freezes
        if control.fail_every and self.generations % control.fail_every == 0:
            return control.fail_status, ApiError(control.fail_status, "scripted failure").body()
        return None


class ScriptMiddleware:
    """Reads each request's script into its scope, answers /control and /arrivals, records
    every request, and plays the faults that come before a response starts."""

    def __init__(self, app: ASGIApp, scripting: Scripting) -> None:
        self.app = app
        self.scripting = scripting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scripting = self.scripting
        body = await _read_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        if (method, path) == ("GET", "/arrivals"):
            await _json(send, 200, scripting.arrivals())
            return
        try:
            if (method, path) == ("POST", "/control"):
                await _json(send, 200, scripting.update(json.loads(body)))
                return
            script = overlay(scripting.script, json.loads(headers.get(SCRIPT_HEADER, "{}")))
        except ValueError as exc:  # json.JSONDecodeError included
            await _json(send, 400, ApiError(400, f"bad script: {exc}").body())
            return
        now = time.perf_counter(), time.time()
        query = scope["query_string"].decode("latin-1")
        scripting.received.append(Received(method, path, query, headers, body, *now))
        failed = scripting.fault() if path in GENERATION_PATHS else None
        if script.headers_delay:
            await asyncio.sleep(script.headers_delay)
        if failed is None and script.status != 200:
            failed = script.error()
        extra = [(k.lower().encode(), v.encode()) for k, v in script.headers.items()]
        request_id = headers.get("x-request-id", "")

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message, body = {"type": "http.request", "body": body}, None
                return message
            message = await receive()
            if message["type"] == "http.disconnect":
                scripting.disconnects.append((request_id, time.perf_counter()))
            return message

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if failed is not None:
            await _json(send_with_headers, *failed)
            return
        await self.app({**scope, SCOPE_KEY: script}, replay, send_with_headers)


def script_of(scope: Scope) -> Script | None:
    """The request's script, when the server is scripted."""
    return scope.get(SCOPE_KEY)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
