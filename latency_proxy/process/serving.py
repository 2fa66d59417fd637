"""One process's servers: the listening sockets, the main port's uvicorn server that drains
and the admin port's, the start line and the signals. The command serves with them in one
process; the supervisor and each worker of --workers share them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Literal

import uvicorn
import uvloop

from latency_proxy.base import build
from latency_proxy.base.asgi import ASGIApp
from latency_proxy.base.config import Settings
from latency_proxy.process.app import ProxyApp
from latency_proxy.process.state import ProxyState
from latency_proxy.server.http_protocol import (
    REQUEST_LINE_ALLOWANCE,
    ConnectionLimits,
    protocol_class,
)

log = logging.getLogger("latency_proxy")
HEARTBEAT_TICKS = 5  # of uvicorn's 0.1 s ticks: a worker's heartbeat every 0.5 s


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening socket; with reuse_port, one of several on the port (--workers), among
    which the kernel spreads new connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def bind_shared(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one port (--workers), among which the kernel spreads
    new connections. SO_REUSEPORT lets any process of the same user join a port's group, so
    a port already served is refused first, as one process's bind is: a socket bound
    without SO_REUSEPORT fails with EADDRINUSE where any socket listens. Each socket
    listens at once, so a proxy started later is refused the same way."""
    with bind(host, port) as probe:
        port = probe.getsockname()[1]  # port 0: the one the kernel picked, for all of them
    sockets = [bind(host, port, reuse_port=True) for _ in range(count)]
    for sock in sockets:
        sock.listen()  # the server listens again, with its own backlog
    return sockets


class DrainingServer(uvicorn.Server):
    """The main port: marks the proxy as draining (/readyz says 503) before uvicorn's
    graceful stop (stop accepting, wait for in-flight streams up to --drain-timeout)."""

    def __init__(
        self,
        config: uvicorn.Config,
        state: ProxyState,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._state = state
        # a worker tells its supervisor it serves, then that its loop still runs
        self._heartbeat = heartbeat

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's main loop, every 0.1 s once the server serves; a loop that is stopped
        or stuck sends no heartbeat."""
        if self._heartbeat is not None and counter % HEARTBEAT_TICKS == 0:
            self._heartbeat()
        return await super().on_tick(counter)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if _KEPT_SIGNALS:  # came before uvicorn listened for it
            self.handle_exit(_KEPT_SIGNALS[0], None)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self._state.draining:
            log.info("draining", extra={"fields": {"signal": sig}})
        self._state.draining = True
        super().handle_exit(sig, frame)


class AdminServer(uvicorn.Server):
    """The admin port: stopped by us after the main port has drained, not by signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _uvicorn_config(
    app: ASGIApp, lifespan: Literal["on", "off"], drain_timeout: float, settings: Settings
) -> uvicorn.Config:
    limits = ConnectionLimits(
        max_head_bytes=settings.max_header_bytes + REQUEST_LINE_ALLOWANCE,
        header_timeout=settings.header_timeout,
        write_timeout=settings.write_timeout,
    )
    return uvicorn.Config(
        app,
        loop="uvloop",
        http=protocol_class(limits),
        lifespan=lifespan,
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
        # uvicorn annotates both as int, but only hands them to wait_for and call_later,
        # which take float seconds: a sub-second setting is kept, not truncated
        timeout_graceful_shutdown=drain_timeout,  # type: ignore[arg-type]  # float seconds
        timeout_keep_alive=settings.idle_timeout,  # type: ignore[arg-type]  # float seconds
    )


async def _serve(
    main: DrainingServer, main_sock: socket.socket, admin: AdminServer, admin_sock: socket.socket
) -> None:
    admin_task = asyncio.create_task(admin.serve(sockets=[admin_sock]))
    try:
        await main.serve(sockets=[main_sock])
    finally:
        admin.should_exit = True
        await admin_task


def main_server(
    settings: Settings, app: ProxyApp, heartbeat: Callable[[], None] | None = None
) -> DrainingServer:
    """The main port's server (a worker's only one)."""
    config = _uvicorn_config(app, "on", settings.drain_timeout, settings)
    return DrainingServer(config, app.state, heartbeat)


def admin_server(settings: Settings, app: ASGIApp) -> AdminServer:
    return AdminServer(_uvicorn_config(app, "off", 1.0, settings))


def log_listening(
    settings: Settings,
    main_sock: socket.socket,
    admin_sock: socket.socket,
    open_files: tuple[int, int],
) -> None:
    """The start line; `open_files`: the soft limit now, and before it was raised."""
    log.info(
        "listening",
        extra={
            "fields": {
                "main": "{}:{}".format(*main_sock.getsockname()[:2]),
                "admin": "{}:{}".format(*admin_sock.getsockname()[:2]),
                "routes": {r.name: r.shown_url for r in settings.routes},
                "content_capture": settings.content_capture,
                "open_files_limit": open_files[0],  # the soft limit, raised to the hard one
                "open_files_limit_raised_from": open_files[1],  # the same when nothing to raise
                "workers": settings.workers,
                "version": build.VERSION,
                "hot_path": build.running(),  # compiled (mypyc) or pure
            }
        },
    )


# SIGINT and SIGTERM received while uvicorn's own handlers are not in place
_KEPT_SIGNALS: list[int] = []


def keep_signals() -> None:
    """Until uvicorn's handlers are in place, a SIGINT or SIGTERM is kept, and the main
    server drains as soon as it has started (DrainingServer.startup): one sent right after
    the start line is acted on, not lost. After uvicorn's handlers are gone, its re-raise
    of the signal that stopped it is kept the same way and nothing more: by then we have
    drained and flushed, and the exit code stays 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: _KEPT_SIGNALS.append(signum))


def serve(settings: Settings, app: ProxyApp, open_files: tuple[int, int]) -> None:
    main_sock = bind(settings.host, settings.port)
    admin_sock = bind(settings.admin_host, settings.admin_port)
    main = main_server(settings, app)
    admin = admin_server(settings, app.admin)
    keep_signals()
    log_listening(settings, main_sock, admin_sock, open_files)
    uvloop.run(_serve(main, main_sock, admin, admin_sock))
