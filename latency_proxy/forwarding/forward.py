"""The main port: check each request, route it, admit it, and hand it to the upstream call.

Everything a request is refused for (header limits, body size, unknown model, concurrency)
is decided here, before any upstream sees it; the call itself is upstream/call.py, the
byte relay relay.py, and what is recorded about it telemetry/request_writer.py.
"""

from __future__ import annotations

import asyncio
import logging
import time

from opentelemetry.context import Context
from opentelemetry.propagate import extract

from latency_proxy.base.asgi import Receive, Scope, Send
from latency_proxy.base.config import Route, Settings
from latency_proxy.forwarding.call import UpstreamCaller
from latency_proxy.forwarding.identity import request_id_from
from latency_proxy.forwarding.models_list import list_models
from latency_proxy.forwarding.request import (
    SESSION_HEADER,
    BodyTooLarge,
    BodyTooSlow,
    ClientGone,
    Head,
    read_body,
    read_head,
)
from latency_proxy.forwarding.responses import answer, answer_error, retry_after_header
from latency_proxy.record.exchange import Exchange
from latency_proxy.record.model_call import MEASURED_PATHS, ModelCall, inspect, model_of
from latency_proxy.record.outcome import Outcome
from latency_proxy.server.extensions import BODY_AT_HAND, HEADERS_TOO_LARGE, ApiError
from latency_proxy.telemetry.logs import bind_request, cut_recorded, escape
from latency_proxy.telemetry.loop_lag import LoopLag
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
from latency_proxy.telemetry.request_writer import RequestWriter
from latency_proxy.telemetry.sessions import SessionTable
from latency_proxy.telemetry.write_queue import WriteQueue
from latency_proxy.upstream.routes import Upstreams, climbs_above_root

log = logging.getLogger("latency_proxy.forward")
perf_counter = time.perf_counter
_TRACE_HEADERS = ((b"traceparent", "traceparent"), (b"tracestate", "tracestate"))
_INTERNAL = ApiError(500, "internal proxy error", "InternalServerError")
# RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host (nginx answers 400 too)
_ONE_HOST = ApiError(400, "an HTTP/1.1 request needs exactly one Host header", "BadRequestError")
# as nginx answers a path above its root; a route's base path stays a boundary
_ABOVE_ROOT = ApiError(400, "the request path climbs above its root", "BadRequestError")


class Forwarder:
    """Handles every request on the main port."""

    def __init__(
        self,
        settings: Settings,
        upstreams: Upstreams,
        telemetry: Telemetry,
        policy: ContentPolicy,
        sessions: SessionTable,
        loop_lag: LoopLag,
    ) -> None:
        """What the process shares (process/state.py), handed down piece by piece."""
        self.settings = settings
        self.upstreams = upstreams
        self.routes = {route.name: route for route in settings.routes}
        self.model_labels = telemetry.model_label
        self.writer = RequestWriter(telemetry, policy, sessions)
        self.write_queue = WriteQueue(self.writer.finish)
        self.loop_lag = loop_lag
        self.upstream_call = UpstreamCaller(
            upstreams,
            self.writer,
            policy,
            (settings.first_n_tokens, settings.stall_threshold),
            settings.retry_after,
            settings.write_timeout,
            settings.max_event_bytes,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = perf_counter()
        wall0 = time.time_ns()
        head = read_head(scope["headers"])
        first = head.first
        request_id = request_id_from(first.get(b"x-request-id"))
        method: str = scope["method"]
        path: str = scope["path"]
        measured = method == "POST" and path in MEASURED_PATHS
        carrier = {}
        for key, name in _TRACE_HEADERS:
            value = first.get(key)
            if value is not None:
                carrier[name] = value.decode("latin-1")
        # no trace headers: every propagator returns the empty context it was given
        parent = extract(carrier) if carrier else Context()
        server_span = self.writer.spans.start_server(scope, request_id, measured, parent, wall0)
        bind_request(request_id, server_span.context)
        exchange = Exchange(request_id, method, path, t0, wall0, server_span)
        exchange.loop_mark = self.loop_lag.mark()
        exchange.session_header = first.get(SESSION_HEADER)
        try:
            await self._handle(exchange, head, scope, receive, send, measured)
        except asyncio.CancelledError:  # the drain timeout ran out: the server cut the stream
            exchange.fail(Outcome.PROXY_ERROR, "shutdown")
            cut_recorded()  # its record says so: uvicorn's traceback of the cut would repeat it
            raise
        except Exception as exc:  # last resort: the request still gets its span and log line
            exchange.fail(Outcome.PROXY_ERROR, type(exc).__name__)
            log.error("unhandled error", exc_info=exc)
            if exchange.status == 0:
                await answer_error(exchange, send, _INTERNAL)
        finally:
            self.writer.metrics.ended(exchange)
            exchange.loop_lag_max_s = self.loop_lag.worst_since(exchange.loop_mark)
            self.write_queue.submit(exchange, perf_counter())

    async def _handle(
        self,
        exchange: Exchange,
        head: Head,
        scope: Scope,
        receive: Receive,
        send: Send,
        measured: bool,
    ) -> None:
        settings = self.settings
        if head.hosts > 1 or (not head.hosts and scope.get("http_version") == "1.1"):
            await self._reject(exchange, send, _ONE_HOST)
            return
        if len(scope["headers"]) > settings.max_headers or head.size > settings.max_header_bytes:
            await self._reject(exchange, send, HEADERS_TOO_LARGE)
            return
        if climbs_above_root(scope.get("raw_path") or scope["path"].encode()):
            await self._reject(exchange, send, _ABOVE_ROOT)
            return
        declared = head.first.get(b"content-length")
        try:
            body = await read_body(
                receive,
                settings.max_body_size,
                int(declared) if declared and declared.isdigit() else None,
                settings.body_timeout,
                scope.get("extensions", {}).get(BODY_AT_HAND),
            )
        except BodyTooLarge:  # the rest of the body is not read: the connection ends
            message = f"request body larger than {settings.max_body_size} bytes"
            too_large = ApiError(413, message, "RequestTooLarge")
            await self._reject(exchange, send, too_large, close=True)
            return
        except BodyTooSlow:
            message = f"request body not received within {settings.body_timeout:g} s"
            too_slow = ApiError(408, message, "RequestTimeout")
            await self._reject(exchange, send, too_slow, close=True)
            return
        except ClientGone:
            exchange.client_gone()
            return
        exchange.bytes_in = len(body)
        if measured:
            exchange.call = inspect(scope["path"], body, settings.continuous_usage)
            model = exchange.model
        else:  # routed by the model it names, not recorded as a model call
            exchange.call = ModelCall(operation=None, body=body)
            model = model_of(body)
        if scope["method"] == "GET" and scope["path"] == "/v1/models":
            listing = await list_models(self.upstreams, settings.routes, self.model_labels)
            await answer(exchange, send, 200, listing)
            return
        route = self._route_for(model, measured)
        if route is None:
            known = ", ".join(sorted(self.routes))
            message = (
                f"The model `{escape(model or '', 128)}` does not exist. Known models: {known}"
            )
            await self._reject(exchange, send, ApiError(404, message, "NotFoundError", "model"))
            return
        exchange.route = route
        limit = settings.max_concurrent_requests
        if exchange.operation is not None and limit and self.upstream_call.in_flight >= limit:
            message = f"more than {limit} requests in flight; retry later"
            await self._reject(
                exchange,
                send,
                ApiError(503, message, "ServiceUnavailable"),
                retry_after=settings.retry_after,
            )
            return
        await self.upstream_call(exchange, scope, receive, send)

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
        exchange: Exchange,
        send: Send,
        error: ApiError,
        retry_after: float | None = None,
        close: bool = False,
    ) -> None:
        """Refuse a request the proxy will not send upstream; it is still recorded."""
        if exchange.call is None:  # refused before the body was read: still a model call
            exchange.call = ModelCall(operation=MEASURED_PATHS.get(exchange.path), body=b"")
        exchange.fail(Outcome.REJECTED, error.kind)
        extra = [] if retry_after is None else retry_after_header(retry_after)
        if close:
            extra.append((b"connection", b"close"))
        await answer_error(exchange, send, error, extra)
