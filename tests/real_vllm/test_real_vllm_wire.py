"""vLLM's wire format, live: the recorded fixture is current, the simulator speaks it, and
the proxy passes it through (errors included)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.real_vllm.wire_format import (
    KNOWN_SIM_MISMATCHES,
    capture,
    capture_sim,
    captured_names,
    differences,
    load_fixture,
    save_fixture,
)
from tests.support.proxy import ProxyProcess

# the first test also waits for the session fixtures: the tiny model and vLLM's start
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

# X-Accel-Buffering: no is the proxy's own, on purpose (an nginx in front must not buffer SSE)
PROXY_HEADERS = {"x-accel-buffering"}


@pytest.fixture(scope="module")
def live(vllm: VLLMServer) -> dict[str, Any]:
    captured = capture(vllm.url, MODEL)
    if os.environ.get("REAL_VLLM_RECORD") == "1":  # refresh the default suite's fixture
        save_fixture(captured)
    return captured


@pytest.fixture(scope="module")
def sim() -> dict[str, Any]:
    return capture_sim(MODEL)


@pytest.fixture(scope="module")
def proxied(vllm_proxy: ProxyProcess) -> dict[str, Any]:
    captured = capture(vllm_proxy.url, MODEL)
    for record in captured.values():
        if "headers" in record:  # not in the compact "lax_coercion" record
            record["headers"] = sorted(set(record["headers"]) - PROXY_HEADERS)
    return captured


def test_recorded_fixture_is_what_vllm_sends(live: dict[str, Any]) -> None:
    assert differences(load_fixture(), live) == [], "re-record with REAL_VLLM_RECORD=1"


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_SIM_MISMATCHES[name]))
        if name in KNOWN_SIM_MISMATCHES
        else name
        for name in captured_names(MODEL)
    ],
)
def test_sim_speaks_live_vllms_wire_format(
    live: dict[str, Any], sim: dict[str, Any], scenario: str
) -> None:
    assert differences({scenario: live[scenario]}, {scenario: sim[scenario]}) == []


@pytest.mark.parametrize("scenario", captured_names(MODEL))
def test_proxy_keeps_vllms_wire_format(
    live: dict[str, Any], proxied: dict[str, Any], scenario: str
) -> None:
    assert differences({scenario: live[scenario]}, {scenario: proxied[scenario]}) == []
