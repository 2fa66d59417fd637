"""Shared fixtures: a scripted upstream (loadgen.sim), a real OTLP receiver, proxies as real
processes, a headless chromium for the pages.

Helpers that tests import live in tests/support; this file holds fixtures only.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator

import pytest

from tests.support.browser import Browser
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.proxy import ProxyProcess, proxy_env
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


@pytest.fixture(scope="session")
def otlp() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def start_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    started: list[ProxyProcess] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        ready: bool = True,
        open_files: tuple[int, int] | None = None,
        address_space: tuple[int, int] | None = None,
    ) -> ProxyProcess:
        log_path = tmp_path_factory.mktemp("proxy") / "proxy.log"
        env = env if env is not None else proxy_env(None)
        proxy = ProxyProcess(list(args), env, log_path, open_files, address_space)
        started.append(proxy)
        return proxy.wait_ready() if ready else proxy

    yield start
    for proxy in started:
        proxy.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def proxy(start_proxy, upstream: Upstream, otlp: OTLPReceiver) -> ProxyProcess:
    """The shared proxy: default route to the scripted upstream, OTLP to the receiver."""
    return start_proxy("--upstream", upstream.url, env=proxy_env(otlp))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless: one per test module that reads pages, so no module's
    tabs weigh on another's."""
    with Browser() as b:
        yield b
