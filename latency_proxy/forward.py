"""The main port: route each request, pass it through, measure the model calls.

The hot path is the relay loop: upstream bytes are sent to the client as they arrive. Only
when the proxy injected a usage request does it hold bytes back, and then never longer than
the end of the current event, so it can drop the one event the client did not ask for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import SpanKind

from latency_proxy import exchange as ex
from latency_proxy import semconv as sc
from latency_proxy.config import Route
from latency_proxy.identity import request_id_from
from latency_proxy.logs import bind_request
from latency_proxy.meter import StreamMeter
from latency_proxy.model_call import MEASURED_PATHS, ModelCall, inspect, model_of
from latency_proxy.outcome import Outcome, UpstreamErrorKind
from latency_proxy.recorder import Recorder
from latency_proxy.request import BodyTooLarge, ClientGone, header, read_body
from latency_proxy.responses import error_body, send_json
from latency_proxy.sse import SSEParser
from latency_proxy.state import ProxyState
from latency_proxy.types import Receive, Scope, Send
from latency_proxy.upstream import request_headers, response_headers
from latency_proxy.usage_filter import InjectedUsageFilter

log = logging.getLogger("latency_proxy.forward")
perf_counter = time.perf_counter
MAX_MEASURED_BODY = 8 * 2**20  # non-streaming bodies kept for usage parsing up to this size
_EVENT_STREAM = b"text/event-stream"


class Forwarder:
    """Handles every request on the main port."""

    def __init__(self, state: ProxyState) -> None:
        self.settings = state.settings
        self.telemetry = state.telemetry
        self.upstreams = state.upstreams
        self.policy = state.policy
        self.routes = {route.name: route for route in state.settings.routes}
        self.in_flight = 0  # model calls between admission and last byte
        self.recorder = Recorder()

    # -- entry -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter()
        wall0 = time.time_ns()
        request_id = request_id_from(header(scope, b"x-request-id"))
        method: str = scope["method"]
        path: str = scope["path"]
        measured = method == "POST" and path in MEASURED_PATHS
        carrier = {}
        for key in (b"traceparent", b"tracestate"):
            value = header(scope, key)
            if value is not None:
                carrier[key.decode()] = value.decode("latin-1")
        parent = extract(carrier)
        span_name = f"{method} {path}" if measured or path == "/v1/models" else method
        server_span = self.telemetry.tracer.start_span(
            span_name,
            parent,
            SpanKind.SERVER,
            self._server_attributes(scope, request_id, measured),
            start_time=wall0,
        )
        bind_request(request_id, server_span.get_span_context())
        exchange = ex.Exchange(
            telemetry=self.telemetry,
            request_id=request_id,
            method=method,
            path=path,
            t0=t0,
            wall0_ns=wall0,
            server_span=server_span,
            first_n=self.settings.first_n_tokens,
            policy=self.policy,
        )
        try:
            await self._handle(exchange, scope, receive, send, measured)
        except asyncio.CancelledError:  # the drain timeout ran out: the server cut the stream
            exchange.fail(Outcome.PROXY_ERROR, "shutdown")
            raise
        except Exception as exc:  # last resort: the request still gets its span and log line
            exchange.fail(Outcome.PROXY_ERROR, type(exc).__name__)
            log.error("unhandled error", exc_info=exc)
            if exchange.status == 0:
                await self._send_error(
                    exchange, send, 500, "internal proxy error", "InternalServerError"
                )
        finally:
            self.recorder.submit(exchange, perf_counter())

    @staticmethod
    def _server_attributes(scope: Scope, request_id: str, measured: bool) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            sc.HTTP_REQUEST_METHOD: scope["method"],
            sc.URL_PATH: scope["path"],
            sc.URL_SCHEME: scope.get("scheme", "http"),
            sc.NETWORK_PROTOCOL_VERSION: scope.get("http_version", "1.1"),
            sc.REQUEST_ID: request_id,
        }
        if measured:
            attributes[sc.HTTP_ROUTE] = scope["path"]
        server = scope.get("server")
        if server:
            attributes[sc.SERVER_ADDRESS] = str(server[0])
            attributes[sc.SERVER_PORT] = int(server[1])
        client = scope.get("client")
        if client:
            attributes[sc.CLIENT_ADDRESS] = str(client[0])
        return attributes

    async def _handle(
        self, exchange: ex.Exchange, scope: Scope, receive: Receive, send: Send, measured: bool
    ) -> None:
        headers = scope["headers"]
        if (
            len(headers) > self.settings.max_headers
            or sum(len(k) + len(v) for k, v in headers) > self.settings.max_header_bytes
        ):
            await self._reject(
                exchange,
                send,
                431,
                "request headers too many or too large",
                "RequestHeaderFieldsTooLarge",
            )
            return
        declared = header(scope, b"content-length")
        try:
            body = await read_body(
                receive,
                self.settings.max_body_size,
                int(declared) if declared and declared.isdigit() else None,
            )
        except BodyTooLarge:
            await self._reject(
                exchange,
                send,
                413,
                f"request body larger than {self.settings.max_body_size} bytes",
                "RequestTooLarge",
            )
            return
        except ClientGone:
            exchange.fail(Outcome.CLIENT_ABORT, "client_disconnect")
            exchange.status = 499
            return
        exchange.bytes_in = len(body)
        if measured:
            call = inspect(scope["path"], body, self.settings.continuous_usage)
            exchange.call = call
            model = call.model
        else:
            call = ModelCall(operation=None, body=body)
            exchange.call = call
            model = model_of(body) if body else None
        if scope["method"] == "GET" and scope["path"] == "/v1/models":
            await self._list_models(exchange, send)
            return
        route = self._route_for(model, measured)
        if route is None:
            known = ", ".join(sorted(self.routes))
            shown = model if len(model or "") <= 128 else (model or "")[:128] + "…"
            await self._reject(
                exchange,
                send,
                404,
                f"The model `{shown}` does not exist. Known models: {known}",
                "NotFoundError",
                "model",
            )
            return
        exchange.route = route
        limit = self.settings.max_concurrent_requests
        if call.operation is not None and limit and self.in_flight >= limit:
            await self._reject(
                exchange,
                send,
                503,
                f"more than {limit} requests in flight; retry later",
                "ServiceUnavailable",
                retry_after=self.settings.retry_after,
            )
            return
        await self._forward(exchange, scope, receive, send, call, route)

    def _route_for(self, model: str | None, measured: bool) -> Route | None:
        if model is not None and model in self.routes:
            return self.routes[model]
        default = self.settings.default_route
        if default is not None:
            return default
        if not measured and model is None:
            return self.settings.routes[0]  # body-less pass-through (GET /health, …)
        return None

    async def _reject(
        self,
        exchange: ex.Exchange,
        send: Send,
        status: int,
        message: str,
        kind: str,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        if exchange.call is None:  # refused before the body was read: still a model call
            exchange.call = ModelCall(operation=MEASURED_PATHS.get(exchange.path), body=b"")
        exchange.fail(Outcome.REJECTED, kind)
        extra = None
        if retry_after is not None:
            extra = [(b"retry-after", str(max(1, round(retry_after))).encode())]
        await self._send_error(exchange, send, status, message, kind, param, extra)

    @staticmethod
    async def _send_error(
        exchange: ex.Exchange,
        send: Send,
        status: int,
        message: str,
        kind: str,
        param: str | None = None,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """Answer with the proxy's own OpenAI-style error."""
        exchange.status = status
        body = error_body(status, message, kind, param)
        exchange.bytes_out = len(body)
        await send_json(send, status, body, exchange.request_id, extra)

    # -- the upstream call -----------------------------------------------------------------

    async def _forward(
        self,
        exchange: ex.Exchange,
        scope: Scope,
        receive: Receive,
        send: Send,
        call: ModelCall,
        route: Route,
    ) -> None:
        client_span = exchange.start_client_span()
        trace_headers: dict[str, str] = {}
        inject(trace_headers, trace.set_span_in_context(client_span))
        client = scope.get("client")
        headers = request_headers(
            scope["headers"],
            exchange.request_id,
            trace_headers,
            identity_encoding=call.operation is not None,
            client_host=client[0] if client else None,
            scheme=scope.get("scheme", "http"),
        )
        authorization = self.upstreams.authorization(route)
        if authorization is not None:
            headers["Authorization"] = authorization
        url = route.url + scope["path"]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        if call.operation is not None:
            exchange.admitted()
            if self.policy.captures:
                exchange.capture_input(call.body)
        session = self.upstreams.session(route)
        exchange.t_upstream_call = perf_counter()
        task = asyncio.current_task()
        assert task is not None
        disconnected = asyncio.Event()
        watcher = asyncio.create_task(self._watch_disconnect(receive, disconnected, task))
        self.in_flight += 1
        try:
            await self._exchange(exchange, session, scope["method"], url, headers, call, send)
        except asyncio.CancelledError:
            if not disconnected.is_set():
                raise
            task.uncancel()
            exchange.fail(Outcome.CLIENT_ABORT, "client_disconnect")
            if exchange.status == 0:
                exchange.status = 499
        finally:
            self.in_flight -= 1
            watcher.cancel()

    @staticmethod
    async def _watch_disconnect(
        receive: Receive, flag: asyncio.Event, task: asyncio.Task[Any]
    ) -> None:
        """Cancel the relay when the client goes away, so the upstream request is aborted."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                flag.set()
                task.cancel()
                return

    async def _exchange(
        self,
        exchange: ex.Exchange,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: Any,
        call: ModelCall,
        send: Send,
    ) -> None:
        try:
            response = await session.request(
                method, url, data=call.body or None, headers=headers, allow_redirects=False
            )
        except (TimeoutError, aiohttp.ServerTimeoutError):
            await self._upstream_failed(
                exchange,
                send,
                504,
                Outcome.UPSTREAM_TIMEOUT,
                UpstreamErrorKind.TIMEOUT,
                "upstream did not answer in time",
            )
            return
        except aiohttp.ClientConnectorError:
            await self._upstream_failed(
                exchange,
                send,
                502,
                Outcome.UPSTREAM_ERROR,
                UpstreamErrorKind.CONNECT,
                "upstream refused or could not be reached",
            )
            return
        except aiohttp.ClientError:
            await self._upstream_failed(
                exchange,
                send,
                502,
                Outcome.UPSTREAM_ERROR,
                UpstreamErrorKind.PROTOCOL,
                "upstream broke the HTTP exchange",
            )
            return
        async with response:
            exchange.status = response.status
            if response.status >= 500:
                exchange.fail(
                    Outcome.UPSTREAM_ERROR, str(response.status), UpstreamErrorKind.STATUS
                )
            content_type = response.headers.get("Content-Type", "").encode("latin-1")
            event_stream = content_type.startswith(_EVENT_STREAM)
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": response_headers(
                        response.raw_headers, exchange.request_id, event_stream
                    ),
                }
            )
            try:
                if event_stream and call.operation is not None:
                    await self._relay_events(exchange, response, call, send)
                else:
                    await self._relay_body(exchange, response, call, send)
            except (TimeoutError, aiohttp.ServerTimeoutError):
                exchange.fail(Outcome.UPSTREAM_TIMEOUT, "timeout", UpstreamErrorKind.TIMEOUT)
            except aiohttp.ClientError:
                exchange.fail(
                    Outcome.UPSTREAM_ERROR, "upstream_disconnect", UpstreamErrorKind.PROTOCOL
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _upstream_failed(
        self,
        exchange: ex.Exchange,
        send: Send,
        status: int,
        outcome: Outcome,
        kind: UpstreamErrorKind,
        message: str,
    ) -> None:
        exchange.fail(outcome, kind.value, kind)
        kind_name = "GatewayTimeout" if status == 504 else "BadGateway"
        await self._send_error(exchange, send, status, message, kind_name)

    async def _relay_body(
        self, exchange: ex.Exchange, response: aiohttp.ClientResponse, call: ModelCall, send: Send
    ) -> None:
        keep = call.operation is not None
        kept: list[bytes] = []
        kept_size = 0
        async for chunk in response.content.iter_any():
            exchange.bytes_out += len(chunk)
            if keep and kept_size + len(chunk) <= MAX_MEASURED_BODY:
                kept.append(chunk)
                kept_size += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if keep:
            meter = StreamMeter(exchange.t0, exchange.first_n, exchange.policy.captures)
            meter.on_body(b"".join(kept))
            exchange.meter = meter

    async def _relay_events(
        self, exchange: ex.Exchange, response: aiohttp.ClientResponse, call: ModelCall, send: Send
    ) -> None:
        meter = StreamMeter(exchange.t0, exchange.first_n, exchange.policy.captures)
        exchange.meter = meter
        parser = SSEParser()
        on_event = meter.on_event
        usage_filter = None
        if call.injected_usage or call.injected_continuous_usage:
            usage_filter = InjectedUsageFilter(call.injected_usage, call.injected_continuous_usage)
        overhead = 0.0
        chunks = 0
        sent = 0
        try:
            try:
                async for chunk in response.content.iter_any():
                    t = perf_counter()
                    events = parser.feed(chunk)
                    if usage_filter is not None:
                        out = b"".join([usage_filter.feed(e, on_event(t, e)) for e in events])
                    else:
                        for event in events:
                            on_event(t, event)
                        out = chunk
                    if out:
                        sent += len(out)
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    overhead += perf_counter() - t
                    chunks += 1
            finally:
                # what was held back goes out however the upstream ended (not to a client
                # that is gone: then this task was cancelled and the send is skipped)
                tail = usage_filter.flush() + parser.remainder() if usage_filter else b""
                if tail and not _cancelling():
                    sent += len(tail)
                    await send({"type": "http.response.body", "body": tail, "more_body": True})
        finally:
            exchange.bytes_out = sent
            exchange.overhead_event_sum = overhead
            exchange.overhead_events = chunks

    # -- /v1/models ------------------------------------------------------------------------

    async def _list_models(self, exchange: ex.Exchange, send: Send) -> None:
        async def fetch(route: Route) -> list[dict[str, Any]]:
            try:
                session = self.upstreams.session(route)
                async with session.get(
                    route.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=2)
                ) as response:
                    payload = orjson.loads(await response.read())
                    data = payload.get("data") if isinstance(payload, dict) else None
                    if response.status == 200 and isinstance(data, list):
                        return [m for m in data if isinstance(m, dict) and "id" in m]
            except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError):
                pass
            if route.name == "default":
                return []
            return [{"id": route.name, "object": "model", "owned_by": "latency-proxy"}]

        listed = await asyncio.gather(*(fetch(route) for route in self.settings.routes))
        seen: dict[str, dict[str, Any]] = {}
        for models in listed:
            for model in models:
                seen.setdefault(str(model["id"]), model)
        body = orjson.dumps({"object": "list", "data": list(seen.values())})
        exchange.status = 200
        exchange.bytes_out = len(body)
        await send_json(send, 200, body, exchange.request_id)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
