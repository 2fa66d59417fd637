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
from latency_proxy.telemetry.providers import ModelLabels
from latency_proxy.upstream.routes import Upstreams

LIST_TIMEOUT = 2.0


async def list_models(upstreams: Upstreams, routes: Sequence[Route], labels: ModelLabels) -> bytes:
    """The merged listing, as the JSON body to answer with; what the upstreams themselves
    listed becomes the model labels (telemetry.ModelLabels)."""
    listed = await asyncio.gather(*(_route_models(upstreams, route) for route in routes))
    seen: dict[str, dict[str, Any]] = {}
    answered: list[str] = []
    for route, models in zip(routes, listed, strict=True):
        if models is None:
            models = _fallback(route)
        else:
            answered += [str(model["id"]) for model in models]
        for model in models:
            seen.setdefault(str(model["id"]), model)
    if any(models is not None for models in listed):
        labels.listed(answered)
    return orjson.dumps({"object": "list", "data": list(seen.values())})


def _fallback(route: Route) -> list[dict[str, Any]]:
    """A named route that did not answer is listed under its own name."""
    if route.name == DEFAULT_ROUTE:
        return []
    return [{"id": route.name, "object": "model", "owned_by": "latency-proxy"}]


async def _route_models(upstreams: Upstreams, route: Route) -> list[dict[str, Any]] | None:
    """The upstream's own listing; None when it gave none."""
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
    return None
