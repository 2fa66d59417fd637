"""One connection pool per route, and header hygiene in both directions (RFC 9110 §7.6.1).

Everything the proxy sends upstream goes through its own HTTP/1.1 client
(upstream/pool.py, upstream/connection.py): requests on the main port on one pool per
route, readiness probes and /v1/models listings (upstream/probe.py) on a small pool of
their own per route, with the same credential.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterable
from urllib.parse import unquote, unquote_to_bytes, urlsplit

from latency_proxy.base.asgi import Scope
from latency_proxy.base.config import Route, Settings
from latency_proxy.upstream.connection import Response
from latency_proxy.upstream.pool import Attempt, Origin, Pool, Timeouts
from latency_proxy.upstream.probe import probe

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
# set by us or by the pool from the body we send
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
_NOT_TO_CLIENT_HEAD = frozenset({b"x-request-id"})
_NOT_TO_CLIENT = _NOT_TO_CLIENT_HEAD | {b"content-length"}
# what a request never takes upstream, by (identity encoding asked for, the route's own
# credential sent): built once, not per request
_DROP_UPSTREAM = {
    (identity, credential): HOP_BY_HOP
    | _REPLACED_UPSTREAM
    | ({b"accept-encoding"} if identity else set())
    | ({b"authorization"} if credential else set())
    for identity in (False, True)
    for credential in (False, True)
}
_DROP_TO_CLIENT = {
    head: HOP_BY_HOP | (_NOT_TO_CLIENT_HEAD if head else _NOT_TO_CLIENT) for head in (False, True)
}
PROBE_CONNECTIONS = 4  # per route: readiness probes and listings are few, short, and apart


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return tokens


def upstream_target(scope: Scope) -> bytes:
    """The path and query exactly as the client sent them: `%2e%2e`, `%2F` and `%3F` stay
    encoded, so the upstream resolves what the client wrote (the route's base path goes
    before it: pool.Origin; a path that would climb out of it was refused:
    `climbs_above_root`)."""
    target: bytes = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    return target


def climbs_above_root(raw_path: bytes) -> bool:
    """Whether the path's dot-segments, plain or percent-encoded, climb above its root: the
    route's base path (`/tenant-a`) goes before it, and an upstream that resolves them
    (RFC 3986 §5.2.4; nginx and most servers do, after decoding) would serve what lies
    beside the base. Read as the most lenient upstream would: `%2e` and `%2F` decoded,
    `\\` a separator, `;params` cut from a segment (`..;`), empty segments not a level
    (`//` merged). The path itself is never rewritten: this only says whether to refuse it."""
    if b"." not in raw_path and b"%" not in raw_path:
        return False  # no dot-segment can hide in it (the common case: one scan)
    path = unquote_to_bytes(raw_path).replace(b"\\", b"/")
    depth = 0
    for segment in path.split(b"/"):
        segment = segment.partition(b";")[0]
        if segment == b"..":
            if depth == 0:
                return True
            depth -= 1
        elif segment and segment != b".":
            depth += 1
    return False


def request_headers(
    incoming: Iterable[tuple[bytes, bytes]],
    request_id: str,
    trace_headers: dict[str, str],
    identity_encoding: bool,
    client_host: str | None,
    scheme: str,
    authorization: bytes | None,
) -> list[tuple[bytes, bytes]]:
    """End-to-end headers of the client's request, byte for byte, plus identity, trace
    context and the route's own credential."""
    incoming = list(incoming)
    drop = _DROP_UPSTREAM[identity_encoding, authorization is not None]
    tokens = _connection_tokens(incoming)
    if tokens:
        drop = drop | tokens
    headers: list[tuple[bytes, bytes]] = []
    forwarded_for = None
    forwarded_proto = False
    for name, value in incoming:
        lower = name.lower()
        if lower in drop:
            continue
        if lower == b"x-forwarded-for":
            forwarded_for = value if forwarded_for is None else forwarded_for + b", " + value
            continue
        forwarded_proto = forwarded_proto or lower == b"x-forwarded-proto"
        headers.append((name, value))
    if client_host:
        host = client_host.encode()
        chain = forwarded_for + b", " + host if forwarded_for else host
        headers.append((b"X-Forwarded-For", chain))
        if not forwarded_proto:
            headers.append((b"X-Forwarded-Proto", scheme.encode()))
    headers.append((b"X-Request-Id", request_id.encode()))
    headers.extend((name.encode(), value.encode()) for name, value in trace_headers.items())
    if authorization is not None:
        headers.append((b"Authorization", authorization))
    return headers


def response_headers(
    raw: Iterable[tuple[bytes, bytes]], request_id: str, event_stream: bool, head: bool = False
) -> list[tuple[bytes, bytes]]:
    """End-to-end headers of the upstream's response, plus ours; lowercase names (ASGI).
    The body is re-framed for the client, so its length goes, but for a HEAD answer's
    (no body: the length a GET would get, RFC 9110 §9.3.2, kept as nginx keeps it)."""
    raw = list(raw)
    drop = _DROP_TO_CLIENT[head]
    tokens = _connection_tokens(raw)
    if tokens:
        drop = drop | tokens
    headers = []
    for name, value in raw:
        lower = name.lower()
        if lower not in drop:
            headers.append((lower, value))
    headers.append((b"x-request-id", request_id.encode()))
    if event_stream:
        headers.append((b"x-accel-buffering", b"no"))
    return headers


def _credential(route: Route, key: str | None) -> bytes | None:
    """The route's API key as a bearer token, else the user and password in its URL as
    Basic (as HTTP clients do)."""
    if key:
        return b"Bearer " + key.encode()
    parts = urlsplit(route.url)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return b"Basic " + base64.b64encode(pair.encode())


class Upstreams:
    """The connection pools, created in the app's lifespan (they need a running loop)."""

    def __init__(self, settings: Settings, credentials: dict[str, str] | None = None) -> None:
        self._settings = settings
        credentials = credentials or {}
        self._authorizations = {
            route.name: _credential(route, credentials.get(route.name)) for route in settings.routes
        }
        self.pools: dict[str, Pool] = {}
        # connections of their own, so /readyz and listings never queue behind streams
        self.probes: dict[str, Pool] = {}

    def authorization(self, route: Route) -> bytes | None:
        """The route's own credential, replacing the client's (built once per route)."""
        return self._authorizations[route.name]

    async def start(self) -> None:
        s = self._settings
        tls = ssl.create_default_context(cafile=s.ca_bundle)
        timeouts = Timeouts(s.connect_timeout, s.read_timeout, s.upstream_keepalive)
        for route in s.routes:
            origin = Origin.of(route, tls)
            self.pools[route.name] = Pool(origin, s.pool_max_connections, timeouts)
            self.probes[route.name] = Pool(origin, PROBE_CONNECTIONS, timeouts)

    async def send(
        self,
        route: Route,
        method: str,
        target: bytes,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        attempt: Attempt,
    ) -> Response:
        """The upstream's response head (its body follows: Response.stream); `attempt`
        tells the caller afterwards whether it waited for a pool slot."""
        return await self.pools[route.name].request(method.encode(), target, headers, body, attempt)

    async def probe(self, route: Route, path: bytes) -> tuple[int, bytes]:
        """A short GET of the proxy's own (/health, /v1/models) with the route's credential,
        on the route's probe pool: status and body (upstream/probe.py)."""
        return await probe(self.probes[route.name], path, self.authorization(route))

    async def close(self) -> None:
        for pool in (*self.pools.values(), *self.probes.values()):
            pool.close()
        self.pools.clear()
        self.probes.clear()
