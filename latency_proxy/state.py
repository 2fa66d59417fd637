"""What the main and admin apps of one process share."""

from __future__ import annotations

from dataclasses import dataclass

from latency_proxy.config import Settings
from latency_proxy.telemetry import Telemetry
from latency_proxy.upstream import Upstreams


@dataclass(slots=True)
class ProxyState:
    settings: Settings
    telemetry: Telemetry
    upstreams: Upstreams
    draining: bool = False
