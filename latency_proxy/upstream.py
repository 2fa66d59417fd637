"""One pooled HTTP client per route, and header hygiene in both directions (RFC 9110 §7.6.1).

aiohttp is used directly: DESIGN.md's measurements show httpx's default transport
collapsing under 64 streams and httpx over aiohttp costing more CPU per event than aiohttp
alone; the streaming hot path is the product, so it gets the cheapest client that works.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import aiohttp
from multidict import CIMultiDict

from latency_proxy import pool_wait
from latency_proxy.config import Route, Settings

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
SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
PROBE_CONNECTIONS = 16  # readiness probes and /v1/models listings: few, short, and apart


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return tokens


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
            forwarded_for = value.decode("latin-1")
            continue
        headers.add(name.decode("latin-1"), value.decode("latin-1"))
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
    """The connection pools, created in the app's lifespan (they need a running loop)."""

    def __init__(self, settings: Settings, credentials: dict[str, str] | None = None) -> None:
        self._settings = settings
        self._credentials = credentials or {}
        self.sessions: dict[str, aiohttp.ClientSession] = {}
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
        for route in s.routes:
            connector = aiohttp.TCPConnector(
                limit=s.pool_max_connections,
                limit_per_host=0,
                ttl_dns_cache=60,
                ssl=tls,
            )
            self.sessions[route.name] = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=s.connect_timeout, sock_read=s.read_timeout
                ),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=SKIP_AUTO_HEADERS,
                trace_configs=[pool_wait.tracing()],
            )
        self.probes = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=PROBE_CONNECTIONS, ssl=tls),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    def session(self, route: Route) -> aiohttp.ClientSession:
        return self.sessions[route.name]

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.close()
        self.sessions.clear()
        if self.probes is not None:
            await self.probes.close()
            self.probes = None
