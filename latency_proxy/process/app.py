"""The main-port ASGI application and its lifespan (client pools, telemetry flush).

The admin app (admin.py) runs on its own listener, so the main port can never serve admin
endpoints, and the admin port keeps answering (/readyz: 503, /metrics) while the main port
drains.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

from starlette.applications import Starlette

from latency_proxy.base.asgi import Receive, Scope, Send
from latency_proxy.base.config import Settings
from latency_proxy.forwarding.forward import Forwarder
from latency_proxy.forwarding.models_list import learn_models
from latency_proxy.measure.conversation import KEY_BYTES
from latency_proxy.process.admin import create_admin_app
from latency_proxy.process.state import ProxyState
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
from latency_proxy.telemetry.worker_store import Store
from latency_proxy.upstream.routes import Upstreams

FLUSH_TIMEOUT = 5.0


class ProxyApp:
    """Every path on the main port goes to the forwarder; lifespan owns the pools."""

    def __init__(
        self,
        settings: Settings,
        policy: ContentPolicy | None = None,
        credentials: dict[str, str] | None = None,
        admin_token: str | None = None,
        store: Store | None = None,
        session_key: bytes | None = None,
    ) -> None:
        """`store`: a worker of several keeps its metric values there (worker_store.py);
        `session_key`: the sessions' hash key (config.session_key; None: random)."""
        telemetry = Telemetry(
            [r.name for r in settings.routes], settings.provider_name, store=store
        )
        self.state = ProxyState(
            settings,
            telemetry,
            Upstreams(settings, credentials or {}),
            policy or ContentPolicy(),
            admin_token,
            session_key=session_key or os.urandom(KEY_BYTES),
        )
        s = self.state
        self.forwarder = Forwarder(
            s.settings, s.upstreams, s.telemetry, s.policy, s.sessions, s.loop_lag
        )
        self.admin: Starlette = create_admin_app(self.state)
        self._learning: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.forwarder(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        # websockets are not proxied: returning without accepting closes them

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "lifespan.startup":
                await self.state.upstreams.start()
                self.state.loop_lag.start()
                # the model labels from the upstreams' own listings, from now on
                state = self.state
                self._learning = asyncio.create_task(
                    learn_models(
                        state.upstreams, state.settings.routes, state.telemetry.model_label
                    )
                )
                # everything imported and built so far lives as long as the process: keep it
                # out of the collector's full passes, which otherwise stall every stream
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # closing the pools ends any stream still running (cancelled at the end of the
                # drain), whose record is then queued: write those too, then flush exporters
                if self._learning is not None:
                    self._learning.cancel()
                self.state.loop_lag.stop()
                await self.state.upstreams.close()
                await asyncio.sleep(0)
                self.forwarder.write_queue.flush()
                self.state.telemetry.shutdown(FLUSH_TIMEOUT)
                await send({"type": "lifespan.shutdown.complete"})
                return
