"""The API server in front of the engine: one serial process. Pure, no I/O.

vLLM's API server tokenises and templates each request in one Python process before the
engine core sees it, one request at a time. A burst therefore queues there, each request
waiting for the ones before it: a cost per request plus one per input token (the preset's
efficiency.frontend_request and frontend_token, both 0 by default: no front end).

The same process turns what the engine sampled into each stream's chunks (detokenising,
building and writing each server-sent event): with a cost per output token
(frontend_output_token, 0 by default) each step's tokens are work in the same queue, sent
to the clients once it is done, and a request arriving behind it waits for it. The more
streams are running, the longer that queue: a new request's wait grows with the load, not
only with the arrivals.

Beside that work, a request may take time outside the engine that it queues for behind no
other (the network, HTTP, the client): frontend_latency, 0 by default, which delays each
request's arrival at the engine alike however many come at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.sim.model.roofline import Efficiency
from loadgen.sim.model.sequence import Seq


class Frontend:
    """A first-come-first-served server: when each request reaches the engine, and when
    each step's tokens reach the clients."""

    __slots__ = ("free_at", "latency", "per_output_token", "per_request", "per_token")

    def __init__(self, efficiency: Efficiency) -> None:
        self.per_request = efficiency.frontend_request
        self.per_token = efficiency.frontend_token
        self.per_output_token = efficiency.frontend_output_token
        self.latency = efficiency.frontend_latency
        self.free_at = float("-inf")

    @property
    def active(self) -> bool:
        work = self.per_request > 0 or self.per_token > 0 or self.per_output_token > 0
        return work or self.latency > 0

    def admit(self, now: float, prompt_tokens: int) -> float:
        """The time a request arriving `now` with `prompt_tokens` is handed to the engine."""
        if not self.active:
            return now
        self.free_at = max(now, self.free_at) + self.per_request + self.per_token * prompt_tokens
        return self.free_at + self.latency

    def send(self, now: float, sampled: Sequence[tuple[Seq, float | None]]) -> float:
        """Send what a step sampled at `now` to its clients: each sequence learns when its
        tokens were sent (Seq.sent), which is returned. Without a cost per output token the
        front end has no part in the output path: `now`."""
        sent = now
        if self.per_output_token > 0:
            tokens = sum(seq.stepped for seq, _ in sampled)
            self.free_at = sent = max(now, self.free_at) + self.per_output_token * tokens
        for seq, _ in sampled:
            seq.sent(sent)
        return sent
