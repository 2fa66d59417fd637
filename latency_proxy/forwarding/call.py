"""An admitted request sent to its route and the answer relayed, every failure mapped.

Before the upstream's headers arrive, a failure gets the proxy's own answer (502 or 504,
OpenAI-style); after, the status line is out, so the stream is cut and the exchange
records why. This is the one place where what the upstream client raised becomes an
outcome and kind.
"""

from __future__ import annotations

import time

import orjson
from opentelemetry.propagate import inject

from latency_proxy.base.asgi import Receive, Scope, Send
from latency_proxy.base.config import Route
from latency_proxy.base.semconv import OPERATION_CHAT
from latency_proxy.forwarding.relay import (
    Backpressure,
    cancel_on_disconnect,
    relay_body,
    relay_events,
)
from latency_proxy.forwarding.responses import answer_error, retry_after_header
from latency_proxy.measure.conversation import AnswerDigest
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.record.exchange import Exchange
from latency_proxy.record.outcome import Outcome, UpstreamErrorKind
from latency_proxy.server.extensions import ApiError
from latency_proxy.server.write_watch import WriteWatch
from latency_proxy.server.writers import abort_connection, client_writer
from latency_proxy.telemetry.logs import cut_recorded
from latency_proxy.telemetry.redact import ContentPolicy, request_texts
from latency_proxy.telemetry.request_writer import RequestWriter
from latency_proxy.upstream.connection import ConnectError, OutOfFiles, Response, UpstreamError
from latency_proxy.upstream.pool import Attempt
from latency_proxy.upstream.routes import (
    Upstreams,
    request_headers,
    response_headers,
    upstream_target,
)

perf_counter = time.perf_counter
_EVENT_STREAM = b"text/event-stream"
# a model call's answer in a content coding (the proxy asked for none): not decoded, not read
NOT_MEASURED_ENCODED = "content_encoding"
_TRANSPORT_ERRORS = (TimeoutError, UpstreamError)
# what the client is told when no upstream answer came: status, error type, message
_NO_ANSWER = {
    UpstreamErrorKind.TIMEOUT: ApiError(504, "upstream did not answer in time", "GatewayTimeout"),
    UpstreamErrorKind.CONNECT: ApiError(
        502, "upstream refused or could not be reached", "BadGateway"
    ),
    UpstreamErrorKind.PROTOCOL: ApiError(502, "upstream broke the HTTP exchange", "BadGateway"),
}
_NO_CONNECTION = ApiError(
    503, "no free upstream connection in time; retry later", "ServiceUnavailable"
)
_NO_FILES = ApiError(
    503,
    "the proxy has no file descriptor left for a connection; retry later",
    "ServiceUnavailable",
)


class UpstreamCaller:
    """Sends each admitted request upstream; counts the model calls between admission and
    last byte (what --max-concurrent-requests limits: pass-through requests are not counted)."""

    def __init__(
        self,
        upstreams: Upstreams,
        writer: RequestWriter,
        policy: ContentPolicy,
        meter_settings: tuple[tuple[int, ...], float],  # first-N token counts, stall threshold
        retry_after: float,
        write_timeout: float,
        max_event_bytes: int,
    ) -> None:
        self._write_timeout = write_timeout
        self._upstreams = upstreams
        self._retry_after = retry_after_header(retry_after)
        self._spans = writer.spans
        self._metrics = writer.metrics
        self._captures = policy.captures
        self._session_key = writer.sessions.key
        self._first_n, self._stall_threshold = meter_settings
        self._max_event_bytes = max_event_bytes
        self.in_flight = 0

    async def __call__(
        self, exchange: Exchange, scope: Scope, receive: Receive, send: Send
    ) -> None:
        call, route = exchange.call, exchange.route
        assert call is not None and route is not None
        client_span = self._spans.start_client(exchange)
        trace_headers: dict[str, str] = {}
        inject(trace_headers, client_span.as_parent())
        client = scope.get("client")
        headers = request_headers(
            scope["headers"],
            exchange.request_id,
            trace_headers,
            identity_encoding=call.operation is not None,
            client_host=client[0] if client else None,
            scheme=scope.get("scheme", "http"),
            authorization=self._upstreams.authorization(route),
        )
        if call.operation is not None:
            self._metrics.admitted(exchange)
            if self._captures:
                exchange.input_texts = _input_texts(call.body)
        exchange.t_upstream_call = perf_counter()
        counted = call.operation is not None
        self.in_flight += counted
        writes = WriteWatch(send, self._write_timeout)
        try:
            work = self._call(exchange, route, scope, headers, writes)
            client_left = await cancel_on_disconnect(work, scope, receive, writes)
        finally:
            self.in_flight -= counted
        if writes.stalled:  # a client that stopped reading: its socket goes at once
            abort_connection(scope, flush=False)
            exchange.client_gone("write_timeout")
            cut_recorded()
        elif client_left:
            exchange.client_gone()

    async def _call(
        self,
        exchange: Exchange,
        route: Route,
        scope: Scope,
        headers: list[tuple[bytes, bytes]],
        writes: WriteWatch,
    ) -> None:
        call = exchange.call
        assert call is not None
        send = writes.send
        attempt = Attempt()
        try:
            response = await self._upstreams.send(
                route, scope["method"], upstream_target(scope), call.body, headers, attempt
            )
        except _TRANSPORT_ERRORS as exc:
            if attempt.not_retried:
                self._metrics.not_retried(route.name, scope["method"])
            if attempt.waiting and isinstance(exc, TimeoutError):  # the proxy's own queue: full
                exchange.fail(Outcome.REJECTED, "pool_timeout")
                await answer_error(exchange, send, _NO_CONNECTION, self._retry_after)
                return
            if isinstance(exc, OutOfFiles):  # the proxy's own limit, not the upstream
                exchange.fail(Outcome.PROXY_ERROR, "fd_limit")
                await answer_error(exchange, send, _NO_FILES, self._retry_after)
                return
            if isinstance(exc, TimeoutError):
                kind = UpstreamErrorKind.TIMEOUT
            elif isinstance(exc, ConnectError):
                kind = UpstreamErrorKind.CONNECT
            else:
                kind = UpstreamErrorKind.PROTOCOL
            exchange.upstream_failed(kind, kind.value)
            await answer_error(exchange, send, _NO_ANSWER[kind])
            return
        try:
            await self._relay(exchange, scope, response, writes)
        finally:
            response.close()  # nothing, if its body was complete

    async def _relay(
        self, exchange: Exchange, scope: Scope, response: Response, writes: WriteWatch
    ) -> None:
        call = exchange.call
        assert call is not None
        exchange.responded(response.status)
        if response.status >= 500:
            exchange.upstream_failed(UpstreamErrorKind.STATUS, str(response.status))
        event_stream = (response.header(b"content-type") or b"").startswith(_EVENT_STREAM)
        await writes.send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": response_headers(
                    response.raw_headers,
                    exchange.request_id,
                    event_stream,
                    head=scope["method"] == "HEAD",
                ),
            }
        )
        meter = None
        if call.operation is not None:
            if (response.header(b"content-encoding") or b"identity").lower() != b"identity":
                exchange.not_measured = NOT_MEASURED_ENCODED  # passed on as it came
            else:
                if call.operation == OPERATION_CHAT:
                    exchange.answer = AnswerDigest(self._session_key)
                meter = StreamMeter(
                    exchange.t0,
                    self._first_n,
                    self._captures,
                    stall_threshold_s=self._stall_threshold,
                    answer=exchange.answer,
                )
        flow = Backpressure(response, client_writer(scope, writes.unwatched_send), writes)
        cut = True  # unless the body ends as the upstream framed it
        try:
            if event_stream and meter is not None:
                await relay_events(exchange, response, flow, meter, self._max_event_bytes)
            else:
                await relay_body(exchange, response, flow, meter)
            await flow.drain()
            cut = False
        except TimeoutError:
            exchange.upstream_failed(UpstreamErrorKind.TIMEOUT, "timeout")
        except UpstreamError:
            exchange.upstream_failed(UpstreamErrorKind.PROTOCOL, "upstream_disconnect")
        finally:
            flow.stop()
        if cut:  # a body cut short upstream is cut short here too, event streams included
            abort_connection(scope)
            return
        await writes.send({"type": "http.response.body", "body": b"", "more_body": False})


def _input_texts(body: bytes) -> list[tuple[str, str]]:
    """The request's texts, kept for the content policy (only read when it captures)."""
    try:
        return request_texts(orjson.loads(body))
    except orjson.JSONDecodeError:
        return []
