"""What the main and admin apps of one process share."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from latency_proxy.base.config import Settings
from latency_proxy.measure.conversation import KEY_BYTES
from latency_proxy.telemetry.instruments import LOOP_LAG, SESSIONS_EXPIRED
from latency_proxy.telemetry.loop_lag import LoopLag
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
from latency_proxy.telemetry.sessions import EXPIRED_REASONS, SessionTable
from latency_proxy.upstream.routes import Upstreams


@dataclass(slots=True)
class ProxyState:
    settings: Settings
    telemetry: Telemetry
    upstreams: Upstreams
    policy: ContentPolicy = field(default_factory=ContentPolicy)
    admin_token: str | None = None
    draining: bool = False
    # the workers that do not serve now, and why (--workers: the supervisor's view);
    # one process: none
    workers_unready: Callable[[], dict[str, str]] = dict
    session_key: bytes = field(default_factory=lambda: os.urandom(KEY_BYTES), repr=False)
    loop_lag: LoopLag = field(init=False)  # started with the loop, in the app's lifespan
    sessions: SessionTable = field(init=False)

    def __post_init__(self) -> None:
        self.loop_lag = LoopLag(self.telemetry.instrument(LOOP_LAG))
        expired = self.telemetry.instrument(SESSIONS_EXPIRED)
        for reason in EXPIRED_REASONS:  # at 0 from the start: no series is no data
            expired.record(0, (reason,))
        self.sessions = SessionTable(
            self.session_key,
            self.settings.max_sessions,
            self.settings.session_idle,
            lambda reason: expired.record(1, (reason,)),
        )
