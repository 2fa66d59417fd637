"""The ASGI application: dispatch by listening port, lifespan for pools and telemetry.

One uvicorn server listens on both ports, so signals, draining and shutdown happen once;
the port a request arrived on decides which app serves it, so the main port can never
serve admin endpoints.
"""

from __future__ import annotations

import logging
from typing import Any

from latency_proxy.admin import create_admin_app
from latency_proxy.config import Settings
from latency_proxy.forward import Forwarder, Receive, Scope, Send
from latency_proxy.state import ProxyState
from latency_proxy.telemetry import Telemetry
from latency_proxy.upstream import Upstreams

log = logging.getLogger("latency_proxy")
FLUSH_TIMEOUT = 5.0


class ProxyApp:
    def __init__(self, settings: Settings, admin_port: int | None = None) -> None:
        telemetry = Telemetry([r.name for r in settings.routes], settings.provider_name)
        self.state = ProxyState(settings, telemetry, Upstreams(settings))
        self.admin_port = settings.admin_port if admin_port is None else admin_port
        self.forwarder = Forwarder(settings, telemetry, self.state.upstreams)
        self.admin = create_admin_app(self.state)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        server = scope.get("server")
        if server is not None and server[1] == self.admin_port:
            await self.admin(scope, receive, send)
        elif kind == "http":
            await self.forwarder(scope, receive, send)
        # websockets are not proxied: returning without accepting closes them

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "lifespan.startup":
                await self.state.upstreams.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.state.upstreams.close()
                self.state.telemetry.shutdown(FLUSH_TIMEOUT)
                await send({"type": "lifespan.shutdown.complete"})
                return
