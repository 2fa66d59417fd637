"""The Locust engine's HTTP under gevent: geventhttpclient, the library under FastHttpUser.

Locust's users are greenlets, so the client must cooperate with gevent; geventhttpclient is
what Locust's own FastHttpUser is built on (its C parser costs far less per event than
requests/urllib3 under HttpUser; bench/locust_cost.py measures it against loadgen). It is used
directly, not through FastHttpSession, because that fires a request event of its own timed to
the response headers, which is neither TTFT nor E2E. A stream is read a line at a time as
the bytes arrive (`readline`: SSE is line-framed), and measured by measurement.py exactly as
loadgen's asyncio client measures it.
"""

from __future__ import annotations

import time
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

import gevent
import orjson
from geventhttpclient import HTTPClient

from loadgen.analysis.records import UNFINISHED
from loadgen.engine.client import context_limit, first_model_id, token_count, tokenize_body
from loadgen.engine.measurement import Measurement
from loadgen.engine.targets import Target

SETUP_TIMEOUT_S = 10.0  # /tokenize and /v1/models, as loadgen's client allows them


class Cut(Exception):
    """Thrown into a user's greenlet to end its request in flight: its window's drain ended
    (the node's `finish`), and the record says UNFINISHED."""


class StreamingClient:
    """One Locust user's connection to the target (a user sends one request at a time)."""

    def __init__(self, target: Target, timeout_s: float) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.prefix = urlsplit(target.url).path.rstrip("/")
        self._http: HTTPClient | None = None

    @property
    def http(self) -> HTTPClient:
        if self._http is None:
            self._http = HTTPClient.from_url(
                self.target.url, network_timeout=self.timeout_s, connection_timeout=10.0
            )
        return self._http

    def close(self) -> None:
        """Drop the connection: after a failure mid-stream it cannot be reused."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def send(self, path: str, body: dict[str, Any], m: Measurement) -> None:
        """Stream one request into `m`; never raises for server or transport failures."""
        payload = orjson.dumps(body)
        m.sent = time.perf_counter()
        try:
            with gevent.Timeout(self.timeout_s, TimeoutError):
                response = self.http.post(self.prefix + path, body=payload, headers=m.headers())
                with response:
                    m.status = response.status_code
                    if m.status != 200:
                        response.read()  # drained, never recorded: it may quote the prompt
                        m.error = f"http_{m.status}"
                    elif str(response.get("content-type", "")).startswith("text/event-stream"):
                        m.streaming()
                        while line := response.readline(b"\n"):
                            m.feed(time.perf_counter(), line)
                    else:
                        m.body(response.read())
        except Cut:
            m.error = UNFINISHED
            self.close()
        except TimeoutError:
            m.error = "timeout"
            self.close()
        except (OSError, HTTPException) as exc:
            m.error = type(exc).__name__
            self.close()

    def get_json(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """A setup call's JSON answer (POST with a body, else GET), or None."""
        try:
            with gevent.Timeout(SETUP_TIMEOUT_S, TimeoutError):
                if body is None:
                    response = self.http.get(self.prefix + path, headers=self.target.headers)
                else:
                    headers = {"Content-Type": "application/json", **self.target.headers}
                    response = self.http.post(
                        self.prefix + path, body=orjson.dumps(body), headers=headers
                    )
                with response:
                    data = response.read()
                    return orjson.loads(data) if response.status_code == 200 else None
        except (TimeoutError, OSError, HTTPException, orjson.JSONDecodeError):
            self.close()
            return None

    def count_tokens(
        self, model: str, *, prompt: str | None = None, messages: list | None = None
    ) -> int | None:
        """The server's token count via vLLM's /tokenize (as client.count_tokens)."""
        body = tokenize_body(model, prompt=prompt, messages=messages)
        return token_count(self.get_json("/tokenize", body))

    def first_model(self) -> str | None:
        """The first model the target lists at /v1/models (as client.first_model)."""
        return first_model_id(self.get_json("/v1/models"))

    def context_length(self, model: str) -> int | None:
        """The model's max_model_len at /v1/models (as client.context_length)."""
        return context_limit(self.get_json("/v1/models"), model)
