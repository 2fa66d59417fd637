"""A key-protected upstream (the simulator with vLLM's `--api-key`): everything the proxy
sends it itself (readiness probes, /v1/models listings, the listing that learns the model
labels) carries the route's credential exactly as model calls do."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from loadgen.stack.processes import simulator
from tests.support.proxy import proxy_env

KEY = "sk-route-key"
SERVED = "protected-model"


@pytest.fixture(scope="module")
def protected() -> Iterator[str]:
    args = ("--ttft", "0.01", "--itl", "0.005", "--served-model-name", SERVED, "--api-key", KEY)
    with simulator(*args) as url:
        yield url


def test_the_simulator_refuses_v1_paths_without_the_key_as_vllm_does(protected: str) -> None:
    assert httpx.get(protected + "/v1/models").status_code == 401
    assert httpx.get(protected + "/v1/models").json() == {"error": "Unauthorized"}
    wrong = {"authorization": "Bearer nope"}
    assert httpx.get(protected + "/v1/models", headers=wrong).status_code == 401
    right = {"authorization": f"bearer {KEY}"}  # the scheme in any case, as vLLM reads it
    assert httpx.get(protected + "/v1/models", headers=right).status_code == 200
    assert httpx.get(protected + "/health").status_code == 200  # outside /v1: open
    assert httpx.options(protected + "/v1/models").status_code != 401


def test_listings_probes_and_labels_carry_the_route_key(start_proxy, protected: str) -> None:
    env = proxy_env(None, ROUTE_KEY=KEY)
    proxy = start_proxy(
        "--upstream", protected, "--upstream-api-key", "default=env:ROUTE_KEY", env=env
    )
    listing = httpx.get(proxy.url + "/v1/models", timeout=10)
    assert [model["id"] for model in listing.json()["data"]] == [SERVED]
    ready = httpx.get(proxy.admin + "/readyz", timeout=10)
    assert ready.json() == {"status": "ready", "upstreams": {"default": True}}
    # learned from the upstream's listing at start: its model keeps its name, an invented
    # one (which this upstream would answer, 404) is `other`
    for model in (SERVED, "invented"):
        httpx.post(proxy.url + "/v1/completions", json={"model": model, "prompt": "x"}, timeout=10)
    models = set(
        re.findall(
            r'latency_proxy_requests_total\{[^}]*gen_ai_request_model="([^"]+)"', proxy.metrics()
        )
    )
    assert models == {SERVED, "other"}
    assert KEY not in proxy.output()


def test_without_the_route_key_the_listing_is_empty_and_says_why(start_proxy, protected) -> None:
    proxy = start_proxy("--upstream", protected)
    assert httpx.get(proxy.url + "/v1/models", timeout=10).json()["data"] == []
    assert "the upstream refused the listing (401)" in proxy.output()
