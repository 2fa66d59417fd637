"""The admin port: /metrics (optionally behind a bearer token), /healthz, /readyz.

/readyz asks each route's upstream for GET /health on connections of its own (never the
request pool, which streams may fill) and says ready while any route answers: one dead
route of two still leaves the other's traffic to serve, and its requests fail fast (502).
The body lists each route's answer.
"""

from __future__ import annotations

import asyncio
import hmac

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from latency_proxy.models_list import list_models
from latency_proxy.state import ProxyState

READY_PROBE_TIMEOUT = 2.0


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

        async def reachable(name: str, url: str) -> tuple[str, bool]:
            session = state.upstreams.probes
            if session is None:
                return name, False
            try:
                timeout = aiohttp.ClientTimeout(total=READY_PROBE_TIMEOUT)
                async with session.get(url + "/health", timeout=timeout) as response:
                    await response.read()
                    return name, response.status < 500
            except (TimeoutError, aiohttp.ClientError):
                return name, False

        results = dict(
            await asyncio.gather(
                *(reachable(route.name, route.url) for route in state.settings.routes)
            )
        )
        ready = any(results.values())
        if ready and not state.telemetry.model_label.has_listing:
            # the first time the upstreams are up: learn their models, the model labels
            await list_models(state.upstreams, state.settings.routes, state.telemetry.model_label)
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
