"""Fixed timing (`--ttft 300ms --itl 20ms`): an exact test upstream, no model, no queue.

Token i (from 0) of every request is sampled at arrival + ttft + i × itl, independently
of every other request; chunks follow the stream interval (Seq). With `jitter` f, the TTFT and
every gap are scaled by a factor drawn uniformly from [1 − f, 1 + f], seeded per request in
arrival order. A scripted request (script.py) brings its own `ttft` and per-token `itl`.
"""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, Callable

from loadgen.sim.model.sequence import Seq
from loadgen.sim.realtime.clock import sleep_until
from loadgen.sim.realtime.metrics import SimMetrics


class FixedTiming:
    num_waiting = 0
    kv_usage = 0.0
    preemptions = 0
    prefix_cache_queries = 0
    prefix_cache_hits = 0

    def __init__(
        self, ttft: float, itl: float, metrics: SimMetrics, *, seed: int = 0, jitter: float = 0.0
    ) -> None:
        if ttft < 0 or itl < 0 or not 0 <= jitter < 1:
            raise ValueError("ttft and itl must be ≥ 0 and jitter in [0, 1)")
        self.ttft = ttft
        self.itl = itl
        self._metrics = metrics
        self._seed = seed
        self._jitter = jitter
        self._requests = 0
        self.num_running = 0

    async def start(self) -> None:
        """Nothing runs in the background in fixed mode."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def generate(
        self, seq: Seq, ttft: float | None = None, itl: float | None = None
    ) -> AsyncGenerator[int, None]:
        """Yields the cumulative token count of each chunk at its scheduled time: the first
        chunk's last token `ttft` after arrival, every later token `itl` after the one before."""
        ttft = self.ttft if ttft is None else ttft
        itl = self.itl if itl is None else itl
        scale = self._scaler()
        seq.queued_at = seq.scheduled_at = seq.arrival  # no queue: every request runs at once
        due = seq.arrival + ttft * scale()
        self.num_running += 1
        try:
            for end in seq.chunk_ends():
                for _ in range(end - max(seq.generated, seq.first_chunk)):
                    due += itl * scale()
                now = await sleep_until(due)
                self._metrics.schedule_lag.observe(max(0.0, now - due))
                tokens = end - seq.generated
                gap = seq.advance(tokens, now)
                self._metrics.on_token(seq, tokens, gap)
                yield end
        finally:
            self.num_running -= 1

    def _scaler(self) -> Callable[[], float]:
        if not self._jitter:
            return lambda: 1.0
        self._requests += 1
        rng = random.Random(f"{self._seed}:{self._requests}")
        return lambda: 1.0 + rng.uniform(-self._jitter, self._jitter)
