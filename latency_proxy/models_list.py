"""GET /v1/models: one list for every route, as if the proxy were a single server.

Each route's upstream is asked (briefly: a listing must not hang on one dead upstream, and
on connections of its own, upstream.Upstreams.probes, so it never waits behind streams);
the first route naming a model wins. A named route that does not answer is still listed
under its own name, so a client can see every model it may ask for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from latency_proxy.config import DEFAULT_ROUTE, Route
from latency_proxy.upstream import Upstreams

LIST_TIMEOUT = 2.0


async def list_models(upstreams: Upstreams, routes: Sequence[Route]) -> bytes:
    """The merged listing, as the JSON body to answer with."""
    listed = await asyncio.gather(*(_route_models(upstreams, route) for route in routes))
    seen: dict[str, dict[str, Any]] = {}
    for models in listed:
        for model in models:
            seen.setdefault(str(model["id"]), model)
    return orjson.dumps({"object": "list", "data": list(seen.values())})


async def _route_models(upstreams: Upstreams, route: Route) -> list[dict[str, Any]]:
    try:
        assert upstreams.probes is not None  # started with the app
        async with upstreams.probes.get(
            route.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT)
        ) as response:
            payload = orjson.loads(await response.read())
            data = payload.get("data") if isinstance(payload, dict) else None
            if response.status == 200 and isinstance(data, list):
                return [m for m in data if isinstance(m, dict) and "id" in m]
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError):
        pass
    if route.name == DEFAULT_ROUTE:
        return []
    return [{"id": route.name, "object": "model", "owned_by": "latency-proxy"}]
