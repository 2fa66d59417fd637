"""What the main and admin apps of one process share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from latency_proxy.config import Settings
from latency_proxy.telemetry.instruments import LOOP_LAG
from latency_proxy.telemetry.loop_lag import LoopLag
from latency_proxy.telemetry.providers import Telemetry
from latency_proxy.telemetry.redact import ContentPolicy
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
    loop_lag: LoopLag = field(init=False)  # started with the loop, in the app's lifespan

    def __post_init__(self) -> None:
        self.loop_lag = LoopLag(self.telemetry.instrument(LOOP_LAG))
