"""GET /v1/models: one list for every route, as if the proxy were a single server; and the
model labels, learned from the same listings.

Each route's upstream is asked with the route's credential, briefly and on connections of
its own (upstream/probe.py), so a listing never hangs on one dead upstream nor waits behind
streams; the first route naming a model wins. A named route that does not answer is still
listed under its own name, so a client can see every model it may ask for. What the
upstreams list becomes the model labels (telemetry.ModelLabels): asked as the proxy
starts, then on an interval (`learn_models`), so the labels never wait for a client to ask.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import orjson

from latency_proxy.base.config import DEFAULT_ROUTE, Route
from latency_proxy.telemetry.providers import ModelLabels
from latency_proxy.upstream.connection import UpstreamError
from latency_proxy.upstream.routes import Upstreams

log = logging.getLogger("latency_proxy.models_list")
LISTING_RETRY = 2.0  # seconds before the first retry of a listing that was not answered
LISTING_REFRESH = 60.0  # seconds between listings once every route has (adapters come and go)

Models = list[dict[str, Any]]


async def list_models(upstreams: Upstreams, routes: Sequence[Route], labels: ModelLabels) -> bytes:
    """The merged listing, as the JSON body to answer with."""
    listed = await route_listings(upstreams, routes, labels)
    seen: dict[str, dict[str, Any]] = {}
    for route, models in zip(routes, listed, strict=True):
        for model in _fallback(route) if models is None else models:
            seen.setdefault(str(model["id"]), model)
    return orjson.dumps({"object": "list", "data": list(seen.values())})


async def route_listings(
    upstreams: Upstreams, routes: Sequence[Route], labels: ModelLabels
) -> list[Models | None]:
    """Each route's own listing (None where it gave none); each one given becomes that
    route's share of the model labels."""
    listed = await asyncio.gather(*(_route_models(upstreams, route) for route in routes))
    for route, models in zip(routes, listed, strict=True):
        if models is not None:
            _learned(labels, route, models)
    return listed


async def learn_models(upstreams: Upstreams, routes: Sequence[Route], labels: ModelLabels) -> None:
    """Keep the model labels learned, each route on its own: a listing at once, then again
    after LISTING_RETRY seconds while its upstream has not answered one (still loading,
    say), doubling up to LISTING_REFRESH (an upstream with no listing is not asked every
    2 s for ever), and every LISTING_REFRESH once it has."""

    async def learn(route: Route) -> None:
        wait = LISTING_RETRY
        while True:
            models = await _route_models(upstreams, route)
            if models is not None:
                _learned(labels, route, models)
            await asyncio.sleep(LISTING_REFRESH if models is not None else wait)
            wait = LISTING_RETRY if models is not None else min(2 * wait, LISTING_REFRESH)

    await asyncio.gather(*map(learn, routes))


def _learned(labels: ModelLabels, route: Route, models: Models) -> None:
    labels.listed(route.name, [str(model["id"]) for model in models])


def _fallback(route: Route) -> Models:
    """A named route that did not answer is listed under its own name."""
    if route.name == DEFAULT_ROUTE:
        return []
    return [{"id": route.name, "object": "model", "owned_by": "latency-proxy"}]


async def _route_models(upstreams: Upstreams, route: Route) -> Models | None:
    """The upstream's own listing; None when it gave none."""
    try:
        status, body = await upstreams.probe(route, b"/v1/models")
        payload = orjson.loads(body) if status == 200 else None
    except (TimeoutError, UpstreamError, orjson.JSONDecodeError):
        return None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        if status == 401:  # a key-protected upstream that did not take the route's key
            log.warning("route %s: the upstream refused the listing (401)", route.name)
        return None
    return [m for m in data if isinstance(m, dict) and "id" in m]
