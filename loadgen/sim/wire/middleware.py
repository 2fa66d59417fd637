"""Where scripts and faults are played: before the app for what comes before a response,
and around it for the connection they break. Installed only in scripted mode (script.py)
or with --fault (faults.py): without either, no header is read and nothing is recorded.

Each request's Faults (a Script in scripted mode: the server's script and its `x-script`
header) take the fields of the fault drawn for it (its `x-fault` header, or the server's
rules) and go into its scope for the app's stream (`faults_of`). An engine restart is the
server's: it cuts every generation in flight and answers 503 until it is over.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loadgen.sim.wire.connection import cut, drop, transport_of
from loadgen.sim.wire.errors import ApiError
from loadgen.sim.wire.faults import FAULT_HEADER, Faults, Injector, ScriptedDeath
from loadgen.sim.wire.script import (
    GENERATION_PATHS,
    SCRIPT_HEADER,
    Received,
    Script,
    Scripting,
    overlay,
)

FAULTS_KEY = "loadgen.sim.wire.faults"  # where the app finds a request's faults
SCRIPT_KEY = "loadgen.sim.wire.script"  # and, in scripted mode, its script
_ALWAYS_UP = ("/metrics",)  # answers through a restart: a scrape sees the outage


class FaultMiddleware:
    """Reads each request's script and faults into its scope, answers /control and
    /arrivals (scripted mode), records every request (scripted mode), plays the faults that
    come before a response starts, and cuts connections for the faults that break them."""

    def __init__(self, app: ASGIApp, scripting: Scripting | None, injector: Injector | None):
        self.app = app
        self.scripting = scripting
        self.injector = injector
        self.down_until = 0.0  # monotonic time the restarted engine is back
        self._in_flight: set[asyncio.Transport] = set()  # generations a restart cuts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scripting = self.scripting
        body = await _read_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        generation = path in GENERATION_PATHS
        if scripting and (method, path) == ("GET", "/arrivals"):
            await _json(send, 200, scripting.arrivals())
            return
        try:
            if scripting and (method, path) == ("POST", "/control"):
                await _json(send, 200, scripting.update(json.loads(body)))
                return
            faults = self._script(headers)
        except ValueError as exc:  # json.JSONDecodeError included
            await _json(send, 400, ApiError(400, f"bad script: {exc}").body())
            return
        try:
            if self.injector and generation:
                faults = overlay(faults, self.injector.draw(headers.get(FAULT_HEADER)))
        except ValueError as exc:
            await _json(send, 400, ApiError(400, f"bad fault: {exc}").body())
            return
        if scripting:
            now = time.perf_counter(), time.time()
            query = scope["query_string"].decode("latin-1")
            scripting.received.append(Received(method, path, query, headers, body, *now))
        failed = scripting.fault() if scripting and generation else None
        if faults.restart_s and self.down_until <= time.monotonic():  # none while restarting
            self.restart(faults.restart_s)
        if faults.headers_delay:
            await asyncio.sleep(faults.headers_delay)
        extra = [(k.lower().encode(), v.encode()) for k, v in faults.headers.items()]
        if path not in _ALWAYS_UP and (down := self.down_until - time.monotonic()) > 0:
            extra.append((b"retry-after", b"%d" % math.ceil(down)))
            failed = 503, ApiError(503, "The engine is restarting.").body()
        if failed is None and faults.status != 200:
            failed = faults.error()
        request_id = headers.get("x-request-id", "")

        unread = [body]  # the body, read above, is handed to the app once

        async def replay() -> Message:
            if unread:
                return {"type": "http.request", "body": unread.pop()}
            message = await receive()
            if message["type"] == "http.disconnect" and scripting:
                scripting.disconnects.append((request_id, time.perf_counter()))
            return message

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if failed is not None:
            await _json(send_with_headers, *failed)
            return
        scope = {**scope, FAULTS_KEY: faults}
        if scripting:
            scope[SCRIPT_KEY] = faults
        transport = transport_of(scope) if generation else None
        if transport is not None:
            self._in_flight.add(transport)
        try:
            await self.app(scope, replay, send_with_headers)
        except ScriptedDeath as death:
            if not await drop(scope, replay, reset=death.reset):
                raise  # no transport: the server closes the connection (and logs it)
        finally:
            self._in_flight.discard(transport)

    def restart(self, down_s: float) -> None:
        """The engine restarts: every generation in flight loses its connection (each
        response sees its client go and frees its batch slot), and until `down_s` from now
        every request but a scrape answers 503."""
        self.down_until = time.monotonic() + down_s
        for transport in list(self._in_flight):
            cut(transport, reset=False)

    def _script(self, headers: dict[str, str]) -> Faults:
        """The request's faults before any is drawn: its script in scripted mode."""
        if self.scripting is None:
            return Faults()
        return overlay(self.scripting.script, json.loads(headers.get(SCRIPT_HEADER, "{}")))


def faults_of(scope: Scope) -> Faults | None:
    """The request's faults, when the server plays any."""
    return scope.get(FAULTS_KEY)


def script_of(scope: Scope) -> Script | None:
    """The request's script, when the server is scripted."""
    return scope.get(SCRIPT_KEY)


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
