"""The API server in front of the engine: one serial process. Pure, no I/O.

vLLM's API server tokenises and templates each request in one Python process before the
engine core sees it, one request at a time. A burst therefore queues there, each request
waiting for the ones before it: a cost per request plus one per input token (the preset's
efficiency.frontend_request and frontend_token, both 0 by default: no front end).
"""

from __future__ import annotations

from loadgen.sim.model.roofline import Efficiency


class Frontend:
    """A first-come-first-served server: when each request reaches the engine."""

    __slots__ = ("free_at", "per_request", "per_token")

    def __init__(self, efficiency: Efficiency) -> None:
        self.per_request = efficiency.frontend_request
        self.per_token = efficiency.frontend_token
        self.free_at = float("-inf")

    @property
    def active(self) -> bool:
        return self.per_request > 0 or self.per_token > 0

    def admit(self, now: float, prompt_tokens: int) -> float:
        """The time a request arriving `now` with `prompt_tokens` is handed to the engine."""
        if not self.active:
            return now
        self.free_at = max(now, self.free_at) + self.per_request + self.per_token * prompt_tokens
        return self.free_at
