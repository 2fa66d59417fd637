"""The admin port: /metrics (optionally behind a bearer token), /healthz, /readyz.

/readyz asks each route's upstream for GET /health, with the route's credential, on
connections of its own (upstream/probe.py; never the request pool, which streams may
fill) and says ready while any route answers: one dead route of two still leaves the
other's traffic to serve, and its requests fail fast (502). The body lists each route's
answer.
"""

from __future__ import annotations

import asyncio
import hmac

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from latency_proxy.base.config import Route as UpstreamRoute
from latency_proxy.process.state import ProxyState
from latency_proxy.upstream.connection import UpstreamError


def create_admin_app(state: ProxyState) -> Starlette:
    expected = f"Bearer {state.admin_token}".encode() if state.admin_token else None

    async def metrics(request: Request) -> Response:
        if expected is not None:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return JSONResponse(
                    {"error": "unauthorized"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        body, content_type = state.telemetry.exposition(request.headers.get("accept", ""))
        return Response(body, media_type=content_type)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(request: Request) -> Response:
        if state.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        unready = state.workers_unready()
        if unready:
            return JSONResponse({"status": "unready", "workers": unready}, status_code=503)

        async def reachable(route: UpstreamRoute) -> tuple[str, bool]:
            try:
                status, _ = await state.upstreams.probe(route, b"/health")
            except (TimeoutError, UpstreamError):
                return route.name, False
            return route.name, status < 500

        results = dict(await asyncio.gather(*map(reachable, state.settings.routes)))
        ready = any(results.values())
        return JSONResponse(
            {"status": "ready" if ready else "unready", "upstreams": results},
            status_code=200 if ready else 503,
        )

    return Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )
