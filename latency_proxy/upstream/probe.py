"""A short GET of the proxy's own to a route's upstream: readiness (/health) and listings
(/v1/models), through the same HTTP/1.1 client as the requests it proxies.

Probes go on a pool of their own per route (Upstreams.probes), so they never queue behind
streams that fill the request pool, and carry the route's credential exactly as a model
call does. A probe is bounded in time (the whole exchange) and in size (its body): one
dead or hostile upstream cannot hold a listing or /readyz.
"""

from __future__ import annotations

import asyncio

from latency_proxy.upstream.connection import ProtocolError
from latency_proxy.upstream.pool import Attempt, Pool

PROBE_TIMEOUT = 2.0  # seconds for a whole probe: connect, request, head and body
MAX_PROBE_BODY = 4 * 2**20  # a listing of many adapters fits; an endless body does not


async def probe(
    pool: Pool, path: bytes, authorization: bytes | None, timeout: float = PROBE_TIMEOUT
) -> tuple[int, bytes]:
    """GET `path` under the route's base path: the status and the whole body. Raises
    TimeoutError, or UpstreamError (connect, protocol, a body past MAX_PROBE_BODY)."""
    headers = [(b"accept", b"application/json")]
    if authorization is not None:
        headers.append((b"authorization", authorization))
    async with asyncio.timeout(timeout):
        response = await pool.request(b"GET", path, headers, b"", Attempt())
        try:
            chunks: list[bytes] = []
            size = 0

            def keep(t: float, chunk: bytes) -> None:
                nonlocal size
                size += len(chunk)
                if size > MAX_PROBE_BODY:
                    response.close()  # ends `done` as a protocol error
                else:
                    chunks.append(chunk)

            response.stream(keep)
            await response.done
        except ProtocolError:
            if size > MAX_PROBE_BODY:
                raise ProtocolError("probe answer too large", True) from None
            raise
        finally:
            response.close()
    return response.status, b"".join(chunks)
