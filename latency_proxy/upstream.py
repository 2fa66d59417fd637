"""One pooled HTTP client per route, and header hygiene in both directions (RFC 9110 §7.6.1).

aiohttp is used directly: DESIGN.md's measurements show httpx's default transport
collapsing under 64 streams and httpx over aiohttp costing more CPU per event than aiohttp
alone; the streaming hot path is the product, so it gets the cheapest client that works.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import weakref
from collections.abc import Iterable, Iterator

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from latency_proxy import connection_trace
from latency_proxy.config import Route, Settings
from latency_proxy.connection_trace import ConnectionTrace
from latency_proxy.types import Scope

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-authenticate",
    }
)
# set by us or by the HTTP client from the body we send
_REPLACED_UPSTREAM = frozenset(
    {
        b"host",
        b"content-length",
        b"x-request-id",
        b"traceparent",
        b"tracestate",
        b"expect",
    }
)
_NOT_TO_CLIENT = frozenset({b"content-length", b"x-request-id"})
PROBE_CONNECTIONS = 16  # readiness probes and /v1/models listings: few, short, and apart
SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return tokens


def _as_sent(raw: bytes) -> str:
    """The str aiohttp writes back as exactly these bytes: it writes UTF-8. Bytes that are
    not UTF-8 (obs-text) are the one case that cannot pass unchanged: read as latin-1."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def upstream_url(base: str, scope: Scope) -> URL:
    """The route's base URL plus the path and query exactly as the client sent them:
    `%2e%2e`, `%2F` and `%3F` stay encoded, so the upstream resolves what the client wrote."""
    target = _as_sent(scope.get("raw_path") or scope["path"].encode())
    if scope.get("query_string"):
        target += "?" + _as_sent(scope["query_string"])
    return URL(base + target, encoded=True)


def request_headers(
    incoming: Iterable[tuple[bytes, bytes]],
    request_id: str,
    trace_headers: dict[str, str],
    identity_encoding: bool,
    client_host: str | None,
    scheme: str,
) -> CIMultiDict[str]:
    """End-to-end headers of the client's request, plus identity and trace context."""
    incoming = list(incoming)
    drop = HOP_BY_HOP | _REPLACED_UPSTREAM | _connection_tokens(incoming)
    if identity_encoding:
        drop = drop | {b"accept-encoding"}
    headers: CIMultiDict[str] = CIMultiDict()
    forwarded_for = None
    for name, value in incoming:
        lower = name.lower()
        if lower in drop:
            continue
        if lower == b"x-forwarded-for":
            forwarded_for = _as_sent(value)
            continue
        headers.add(name.decode("latin-1"), _as_sent(value))
    if client_host:
        chain = f"{forwarded_for}, {client_host}" if forwarded_for else client_host
        headers["X-Forwarded-For"] = chain
        headers.setdefault("X-Forwarded-Proto", scheme)
    headers["X-Request-Id"] = request_id
    headers.update(trace_headers)
    return headers


def response_headers(
    raw: Iterable[tuple[bytes, bytes]], request_id: str, event_stream: bool
) -> list[tuple[bytes, bytes]]:
    """End-to-end headers of the upstream's response, plus ours; lowercase names (ASGI)."""
    raw = list(raw)
    drop = HOP_BY_HOP | _NOT_TO_CLIENT | _connection_tokens(raw)
    headers = [(name.lower(), value) for name, value in raw if name.lower() not in drop]
    headers.append((b"x-request-id", request_id.encode()))
    if event_stream:
        headers.append((b"x-accel-buffering", b"no"))
    return headers


class Upstreams:
    """The connection pools, created in the app's lifespan (they need a running loop).

    Each route has a pool, and beside it a session that never pools, for the one retry
    `send` makes: a request that failed on a reused connection before any answer came (the
    upstream had closed an idle connection just as the request went out on it, e.g. vLLM's
    uvicorn after 5 s idle against aiohttp's 15 s) is sent once more on a fresh connection,
    POSTs included, since the upstream found a closed socket, not a request. aiohttp itself
    retries only idempotent methods, and on whatever connection the pool gives.
    """

    def __init__(self, settings: Settings, credentials: dict[str, str] | None = None) -> None:
        self._settings = settings
        self._credentials = credentials or {}
        self.sessions: dict[str, aiohttp.ClientSession] = {}
        self._fresh: dict[str, aiohttp.ClientSession] = {}
        # connections of their own, so /readyz and listings never queue behind streams
        self.probes: aiohttp.ClientSession | None = None

    def authorization(self, route: Route) -> str | None:
        """The route's own API key as a bearer credential, replacing the client's."""
        key = self._credentials.get(route.name)
        return f"Bearer {key}" if key else None

    async def start(self) -> None:
        s = self._settings
        tls: ssl.SSLContext | bool = True
        if s.ca_bundle:
            tls = ssl.create_default_context(cafile=s.ca_bundle)
        traced = connection_trace.tracing()
        for route in s.routes:
            pooled = aiohttp.TCPConnector(
                limit=s.pool_max_connections, limit_per_host=0, ttl_dns_cache=60, ssl=tls
            )
            fresh = aiohttp.TCPConnector(force_close=True, ttl_dns_cache=60, ssl=tls)
            self.sessions[route.name] = self._session(pooled, [traced])
            self._fresh[route.name] = self._session(fresh, [])
        self.probes = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=PROBE_CONNECTIONS, ssl=tls),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    def _session(
        self, connector: aiohttp.TCPConnector, traces: list[aiohttp.TraceConfig]
    ) -> aiohttp.ClientSession:
        s = self._settings
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, connect=s.connect_timeout, sock_read=s.read_timeout
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=SKIP_AUTO_HEADERS,
            trace_configs=traces,
        )

    def session(self, route: Route) -> aiohttp.ClientSession:
        return self.sessions[route.name]

    async def send(
        self,
        route: Route,
        method: str,
        url: URL,
        body: bytes,
        headers: CIMultiDict[str],
        attempt: ConnectionTrace,
    ) -> aiohttp.ClientResponse:
        """The upstream's response to this request, retried once as the class says;
        `attempt` tells the caller afterwards whether it waited for a pool slot."""
        try:
            return await self.sessions[route.name].request(
                method,
                url,
                data=body or None,
                headers=headers,
                allow_redirects=False,
                trace_request_ctx=attempt,
            )
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if not attempt.reused:
                raise
        return await self._fresh[route.name].request(
            method, url, data=body or None, headers=headers, allow_redirects=False
        )

    async def close(self) -> None:
        for session in (*self.sessions.values(), *self._fresh.values()):
            await session.close()
        self.sessions.clear()
        self._fresh.clear()
        if self.probes is not None:
            await self.probes.close()
            self.probes = None


_watched: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()


@contextlib.contextmanager
def body_ends_with_connection(response: aiohttp.ClientResponse) -> Iterator[None]:
    """While the body is read, a connection that goes before the body is complete fails it.

    On invalid chunked framing mid-body aiohttp's C parser closes the connection and keeps
    the error on the connection's protocol, not on the body, and drops the read timeout:
    the body would wait forever. This hands the body a ClientPayloadError instead.
    """
    protocol = response.connection.protocol if response.connection is not None else None
    closed = protocol.closed if protocol is not None else None
    if closed is None:  # already lost: aiohttp has settled the body itself
        yield
        return
    if closed not in _watched:  # once per connection: its loss is never an unread error
        _watched.add(closed)
        closed.add_done_callback(_retrieve)

    def fail_body(_: asyncio.Future[None]) -> None:
        content = response.content
        if not content.is_eof() and content.exception() is None:
            content.set_exception(aiohttp.ClientPayloadError("upstream broke the HTTP framing"))

    closed.add_done_callback(fail_body)
    try:
        yield
    finally:
        closed.remove_done_callback(fail_body)


def _retrieve(closed: asyncio.Future[None]) -> None:
    if not closed.cancelled():
        closed.exception()
