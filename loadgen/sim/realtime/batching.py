"""The continuous-batching engine in real time: the scheduler picks a step, the performance
model says how long it takes, the loop sleeps that long and hands out the sampled tokens.

Steps run back to back on a virtual GPU clock: a step starts when the previous one ended,
not when the loop happened to wake up, so timer lateness does not accumulate into the
simulated TPOT. Only when the loop falls behind by more than RESYNC (an overloaded host) or
the engine was idle does the GPU clock jump to the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncGenerator

from loadgen.sim.model.frontend import Frontend
from loadgen.sim.model.gpus import GpuMeter
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.scheduler import Scheduler
from loadgen.sim.model.sequence import Seq
from loadgen.sim.realtime.clock import sleep_until
from loadgen.sim.realtime.metrics import SimMetrics

logger = logging.getLogger("loadgen.sim")
RESYNC = 0.02  # seconds


class Engine:
    def __init__(
        self, preset: Preset, metrics: SimMetrics, *, seed: int = 0, jitter: float = 0.0
    ) -> None:
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        self.perf = preset.perf
        self.scheduler = Scheduler(preset.engine, preset.kv_capacity_tokens, seed)
        self._frontend = Frontend(preset.perf.efficiency)
        self._metrics = metrics
        self._rng = random.Random(seed)
        self._jitter = jitter
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.gpus = GpuMeter(preset.perf.hardware)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loadgen.sim.realtime.batching")
        self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def generate(self, seq: Seq) -> AsyncGenerator[int, None]:
        """Queue `seq`; yields the cumulative token count of each chunk as it is released.
        Closing the iterator early aborts the request and frees its KV cache. With a front
        end (frontend.py) the engine gets it once the front end is done with it, and a
        chunk is yielded once the front end has sent it."""
        frontend = self._frontend
        if frontend.active:
            seq.arrival = frontend.admit(time.monotonic(), seq.prompt_tokens)
            await sleep_until(seq.arrival)
        self.scheduler.add(seq)
        self._work.set()
        try:
            count = 0
            while count < seq.output_tokens:
                count = await seq.next_chunk(count)
                if frontend.per_output_token > 0 and seq.last_sent_at is not None:
                    await sleep_until(seq.last_sent_at)  # the front end's output work
                yield count
        finally:
            if not seq.finished:
                self.scheduler.abort(seq)

    async def _run(self) -> None:
        gpu_clock = time.monotonic()
        while True:
            if self.scheduler.idle:
                self._work.clear()
                await self._work.wait()
                gpu_clock = time.monotonic()
            gpu_clock = max(gpu_clock, time.monotonic() - RESYNC)
            batch = self.scheduler.schedule(gpu_clock)
            if not batch.work:  # cannot happen while max_model_len fits in the cache
                raise RuntimeError("scheduler made no progress")
            step = batch.step(self.perf)
            duration = step.total
            if self._jitter:
                duration *= 1 + self._rng.uniform(-self._jitter, self._jitter)
            gpu_clock += duration
            self.gpus.add(gpu_clock, duration, self.perf.power(step))
            now = await sleep_until(gpu_clock)
            self._metrics.schedule_lag.observe(max(0.0, now - gpu_clock))
            sampled = self.scheduler.complete(batch, now)
            self._frontend.send(now, sampled)
            for seq, gap in sampled:
                self._metrics.on_token(seq, seq.stepped, gap)


def _report_crash(task: asyncio.Task[None]) -> None:
    """A dead engine would leave every request hanging: say so loudly."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("engine stopped", exc_info=task.exception())
