"""Shared fixtures: a scripted upstream (loadgen.sim), a real OTLP receiver, proxies as real
processes, a headless chromium for the pages.

Helpers that tests import live in tests/support; this file holds fixtures only.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from tests.support.browser import Browser
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.proxy import ProxyProcess, proxy_env, started_proxies
from tests.support.scripted_upstream import Upstream, serve


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--screenshot",
        metavar="DIR",
        help="keep a screenshot of each report.html the browser tests open in DIR",
    )


@pytest.fixture(autouse=True)
def quiet_heap() -> None:
    """Keep full garbage collections short while a test runs.

    Scripted upstreams, simulators and loadgen runs share this process; a full collection of
    the heap the whole suite has built (~300k objects, ~0.3 s) would show up as their latency.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    with serve() as app:
        yield app


@pytest.fixture(scope="module")
def otlp() -> Iterator[OTLPReceiver]:
    """A module's receiver: what it keeps (every export, decoded) grows with the proxies that
    export to it, and every wait reads all of it."""
    with OTLPReceiver() as receiver:
        yield receiver


@pytest.fixture
def start_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ProxyProcess]]:
    """Proxies for one test."""
    with started_proxies(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="module")
def start_module_proxy(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ProxyProcess]]:
    """Proxies a module's tests share."""
    with started_proxies(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="module")
def proxy(start_module_proxy, upstream: Upstream, otlp: OTLPReceiver) -> ProxyProcess:
    """A module's proxy: default route to the scripted upstream, OTLP to the receiver."""
    return start_module_proxy("--upstream", upstream.url, env=proxy_env(otlp))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless: one per test module that reads pages, so no module's
    tabs weigh on another's."""
    with Browser() as b:
        yield b
