"""Drives the load: blocks of closed- or open-loop requests, interleaved across targets.

Closed loop: each of N workers sends, waits for the whole response, and sends again; the
next request's intended time is the moment the previous one ended. Workers start spread over
the block's ramp-up so they do not arrive as one synchronised herd. Open loop: a dispatcher
sleeps until each scheduled arrival and starts the request as its own task, however many are
in flight; a trace of agents' calls sends each call that continues another when that call's
answer has ended, plus its recorded gap (loadgen/replay/sessions.py). A block ends when its
last measured request has finished (load goes on meanwhile,
see loadgen/engine/window.py), so targets never load each other — or when its drain ends: the
measured requests still running then are cut and recorded as unfinished, so a server that
fell behind cannot keep a run going for as long as its queue.

The client watches itself: every request records its send lag (actual − intended), and a
monitor samples event-loop lag, so a run where the client was the bottleneck can be told.

Long because the Runner is one object whose methods share a block's state (its budget, the
requests in flight, the clock, the call graph under way); what needs none of it lives
beside it (schedule.py, conversations.py, window.py, budget.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from latency_proxy.measure.meter import STALL_THRESHOLD_S
from loadgen.analysis import settle
from loadgen.analysis.records import Phase, Record
from loadgen.analysis.server_metrics import ServerWindow
from loadgen.engine import client, server_window
from loadgen.engine.budget import Budget
from loadgen.engine.conversations import Following, Talk
from loadgen.engine.measurement import Clock
from loadgen.engine.probes import Probes
from loadgen.engine.schedule import Block, Load, offsets
from loadgen.engine.server_window import ServerWindows
from loadgen.engine.targets import Target
from loadgen.engine.tasks import cancel, run_until
from loadgen.engine.window import WARMUP
from loadgen.engine.workload import Workload
from loadgen.replay import sessions
from loadgen.replay.prompts import PromptBook
from loadgen.replay.window import Arrival

LOOP_LAG_INTERVAL_S = 0.02
SETTLE_SAMPLE_S = 0.25  # a settling warm-up counts the client's requests in flight this often
SERVER_SAMPLE_S = 1.0  # ... and the server's (running + waiting) this often
DRAIN_CHECK_S = 0.25  # a block whose drain is not yet known looks again this often
WIND_DOWN_S = 5.0  # cut requests still not back by then are cancelled (a stuck connection)
RAMP_SAMPLE = 1000  # recent records a later block's ramp-up is sized from


@dataclass(slots=True)
class RunResult:
    records: list[Record] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    loop_lag: list[tuple[float, float]] = field(default_factory=list)  # (epoch, lag_s)
    server: list[ServerWindow] = field(default_factory=list)


@dataclass(slots=True)
class Runner:
    targets: dict[str, Target]
    models: dict[str, str]  # target name -> model to ask for
    workload: Workload
    rng: np.random.Generator
    timeout_s: float = 600.0
    shard: int = 0
    stall_threshold_s: float = STALL_THRESHOLD_S
    on_record: Callable[[Record], None] | None = None
    book: PromptBook | None = None  # replayed records' prompts
    record_models: bool = False  # a replayed record's model wins over the target's
    server_metrics: tuple[str, ...] = ()  # scraped when each block's measured window opens/closes
    drain_s: float | None = None  # --drain (None: window.drain_s's default)
    probes: Probes | None = None  # eval items and consistency prompts mixed into the load
    clock: Clock = field(default_factory=Clock)
    result: RunResult = field(default_factory=RunResult)
    stopped: bool = False
    _budget: Budget | None = None
    _running: set[client.Cutoff] = field(default_factory=set)  # measured requests in flight
    _flying: set[client.Cutoff] = field(default_factory=set)  # every request in flight
    _landed: asyncio.Event = field(default_factory=asyncio.Event)  # none in flight any more
    _sending: int = 0  # requests sent and not finished, of every kind
    _sent: int = 0  # requests sent so far
    _follow: Following = field(default_factory=lambda: Following(sessions.graph([])))

    @property
    def _servers(self) -> ServerWindows:
        """The servers scraped around each block's window (--server-metrics, set late)."""
        return ServerWindows(self.server_metrics, self.clock, self.result.server)

    def stop(self) -> None:
        """End the run now, keeping what was measured (Ctrl-C, SIGTERM).

        The block under way ends at once and is marked interrupted; its requests in flight
        are cancelled (a cut-off stream has no E2E to report) and later blocks do not start.
        """
        self.stopped = True
        if self._budget is not None:
            self._budget.interrupt()

    def cut_short(self) -> None:
        """Mark the last block interrupted: the run ends before its plan does, even when the
        stop came between two blocks."""
        if self.result.phases:
            self.result.phases[-1].interrupted = True

    async def run(self, blocks: list[Block], load: Load, sweep_level: float | None = None) -> None:
        sessions = {name: client.session() for name in self.targets}
        monitor = asyncio.create_task(self._watch_loop())
        try:
            for block in blocks:
                if self.stopped:
                    self.cut_short()
                    break
                ramp = block.warmup_s if block.index == 0 else self._ramp(block)
                if load.replay is not None:
                    ramp = block.warmup_s  # a trace's head is its own ramp-up
                http = sessions[block.target]
                cap = ramp if block.settle is None else max(ramp, block.settle.max_s)
                cpu_before = time.process_time()
                budget = self._budget = Budget(block, time.perf_counter(), cap, self.drain_s)
                warming = asyncio.create_task(self._warm_up(block, budget, ramp))
                draining = asyncio.create_task(self._drain(budget))
                opening = self._servers.when_open(budget) if self.server_metrics else None
                try:
                    if load.concurrency is not None:
                        await self._closed(block, budget, ramp, load.concurrency, http, sweep_level)
                    else:
                        await self._open(block, budget, load, http, sweep_level)
                finally:
                    warming.cancel()
                    draining.cancel()
                    await asyncio.gather(warming, draining, return_exceptions=True)
                epoch = self.clock.epoch
                wall = time.perf_counter() - budget.start
                cpu = (time.process_time() - cpu_before) / wall if wall > 0 else None
                self.result.phases.append(
                    Phase(
                        target=block.target,
                        block=block.index,
                        start_at=epoch(budget.warm_end),
                        end_at=epoch(budget.closed_at or budget.warm_end),
                        level=sweep_level,
                        done_at=epoch(budget.done_at or time.perf_counter()),
                        interrupted=budget.interrupted,
                        warmup_s=None if block.settle is None else budget.warm_end - budget.start,
                        settled=budget.settled,
                        warmup_in_flight=budget.warmup_in_flight,
                        drain_s=budget.drain_s,
                        client_cpu=cpu,
                    )
                )
                if opening is not None:
                    await self._servers.close(block, opening, budget.closing, sweep_level)
        finally:
            monitor.cancel()
            for http in sessions.values():
                await http.close()

    async def _warm_up(self, block: Block, budget: Budget, ramp: float) -> None:
        """Open the block's measured window: after `ramp`, or, for a block that settles, once
        the in-flight counts stopped growing (settle.py), at the latest after its cap."""
        if block.settle is None:
            await asyncio.sleep(ramp)
            budget.opened.set()
            return
        deadline = budget.start + block.settle.max_s
        counts: list[tuple[float, float]] = []
        server: list[tuple[float, float]] = []
        sent = self._sent
        scraped_at = -math.inf
        while True:
            now = time.perf_counter()
            counts.append((now, self._sending))
            rate = (self._sent - sent) / max(now - budget.start, SETTLE_SAMPLE_S)
            if self.server_metrics and now - scraped_at >= SERVER_SAMPLE_S:
                scraped_at = now
                found = server_window.in_flight(await self._servers.scrape())
                if found is not None:
                    server.append((now, found))
            e2e = self._typical_e2e(block)
            series = [counts, server] if server else [counts]
            if now >= budget.start + ramp and settle.settled(series, e2e, rate):
                budget.open(now, True, e2e)
                return
            warm = now >= budget.start + ramp  # never before the warm-up asked for
            runaway = warm and any(settle.ran_away(s, e2e) for s in series)
            if now >= deadline or runaway:
                budget.warmup_in_flight = settle.quarters(counts)
                budget.open(now, False, None)  # a window of its own length: no E2E to go by
                return
            await asyncio.sleep(SETTLE_SAMPLE_S)

    async def _drain(self, budget: Budget) -> None:
        """Cut the measured requests still running when the block's drain ends: each ends
        at once as an unfinished record, and the block is over."""
        while True:
            ends, now = budget.drain_ends(), time.perf_counter()
            if ends is not None and now >= ends:
                break
            await asyncio.sleep(DRAIN_CHECK_S if ends is None else min(ends - now, DRAIN_CHECK_S))
        budget.cut = True
        for cutoff in self._running:
            cutoff.now()

    def _typical_e2e(self, block: Block) -> float | None:
        """The median E2E of the block's requests finished so far."""
        e2e = [
            r.e2e_s
            for r in self.result.records[-RAMP_SAMPLE:]
            if r.target == block.target and r.block == block.index and r.ok and r.e2e_s
        ]
        return float(np.median(e2e)) if e2e else None

    async def _one(
        self,
        http: aiohttp.ClientSession,
        block: Block,
        intended: float,
        excluded: str | None,
        level: float | None,
        replayed: Arrival | None = None,
        talk: Talk | None = None,
    ) -> Record:
        target = self.targets[block.target]
        path, probe = self.workload.path, None
        answer: list[str] | None
        if talk is not None:
            body, answer = self.workload.turn(self.models[block.target], talk.history), []
        elif (
            self.probes is not None
            and replayed is None
            and (
                probe := self.probes.take(block.target, self.models[block.target], excluded is None)
            )
        ):
            path, body, answer = probe.path, probe.body, []
        else:
            body, answer = self._body(block.target, replayed), None
            if replayed is not None and self._follow.awaited(replayed):
                answer = []  # its answer goes into the prompts of the calls that follow it
        self._sending += 1
        self._sent += 1
        self._landed.clear()
        cutoff = client.Cutoff()
        self._flying.add(cutoff)
        if excluded is None:
            self._running.add(cutoff)
            if self._budget is not None and self._budget.cut:
                cutoff.now()
        try:
            record = await client.send(
                http,
                target,
                path,
                body,
                intended,
                self.clock,
                self.timeout_s,
                answer,
                self.stall_threshold_s,
                cutoff,
            )
        finally:
            self._sending -= 1
            self._running.discard(cutoff)
            self._flying.discard(cutoff)
            if not self._sending:
                self._landed.set()
        record.excluded = excluded
        record.block = block.index
        record.shard = self.shard
        record.level = level
        if replayed is not None:
            record.replay_index = replayed.record.line
            record.session, record.turn = replayed.record.session, replayed.record.turn
            if answer is not None:
                said = answer[0] if record.ok else None
                self._follow.answered(replayed, body, said, record.input_tokens)
        if talk is not None:
            assert answer is not None
            record.session, record.turn = talk.session, len(talk.history) // 2 + 1
            talk.history += [body["messages"][-1], {"role": "assistant", "content": answer[0]}]
        if probe is not None:
            assert self.probes is not None and answer is not None
            self.probes.judge(probe, record, answer[0])
        self.result.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    async def _session(
        self,
        http: aiohttp.ClientSession,
        block: Block,
        intended: float,
        budget: Budget,
        level: float | None,
    ) -> bool:
        """One conversation of --turns requests, each after the answer to the one before and
        a think time; False once the block is over. A failed turn ends the conversation."""
        talk = Talk(uuid.uuid4().hex[:16])
        for turn in range(self.workload.turns):
            if turn:
                intended = time.perf_counter() + self.workload.think.draw(self.rng)
                await asyncio.sleep(max(0.0, intended - time.perf_counter()))
            excluded = budget.take(intended)
            if budget.over.is_set():
                return False
            record = await self._one(http, block, intended, excluded, level, talk=talk)
            budget.finished(excluded)
            if not record.ok:
                break
        return True

    def _body(self, target: str, replayed: Arrival | None) -> dict[str, Any]:
        if replayed is None:
            return self.workload.body(self.models[target])
        assert self.book is not None, "a replay has a prompt book"
        trace = replayed.record
        model = trace.model if self.record_models and trace.model else self.models[target]
        continued = self._follow.said(replayed)
        if continued is None:
            return self.workload.body(model, self.book.prompt(trace))
        return self.workload.body(model, self.book.follow_up(trace, *continued))

    def _ramp(self, block: Block) -> float:
        """A later block's ramp-up: one mean E2E of its target so far, at most the warmup.

        Closed-loop workers spread evenly over one E2E is the loop's steady state, reached
        without the synchronised herd an idle server would otherwise get at a block start.
        """
        e2e = [
            r.e2e_s
            for r in self.result.records[-RAMP_SAMPLE:]
            if r.target == block.target and r.ok and r.excluded is None and r.e2e_s is not None
        ]
        return min(block.warmup_s, sum(e2e) / len(e2e)) if e2e else block.warmup_s

    async def _closed(
        self,
        block: Block,
        budget: Budget,
        ramp: float,
        concurrency: int,
        http: aiohttp.ClientSession,
        level: float | None,
    ) -> None:
        start = budget.start
        # workers start spread over the ramp, so they do not hit the server as one herd
        stagger = ramp / max(1, concurrency)

        async def worker(number: int) -> None:
            intended = start + number * stagger
            await asyncio.sleep(max(0.0, intended - time.perf_counter()))
            while True:
                if self.workload.turns > 1:
                    if not await self._session(http, block, intended, budget, level):
                        return
                else:
                    excluded = budget.take(intended)
                    if budget.over.is_set():
                        return
                    await self._one(http, block, intended, excluded, level)
                    budget.finished(excluded)
                intended = time.perf_counter()  # the worker is free again

        if concurrency > 0:
            workers = [worker(i) for i in range(concurrency)]
            await run_until(budget.over, workers, self._wind_down(budget))

    async def _open(
        self,
        block: Block,
        budget: Budget,
        load: Load,
        http: aiohttp.ClientSession,
        level: float | None,
    ) -> None:
        start = budget.start

        if load.replay is not None:
            self._follow = Following(sessions.graph(load.replay))

        async def one(intended: float, excluded: str | None, replayed: Arrival | None) -> None:
            await self._one(http, block, intended, excluded, level, replayed)
            budget.finished(excluded)
            if replayed is not None:
                for child in self._follow.tree.children.get(replayed.record.line, ()):
                    spawn(follow(child, excluded))

        async def follow(child: Arrival, after: str | None) -> None:
            """A call that continues one whose answer just ended: sent after its gap; in the
            warm-up when its parent was (sessions.measured counts it so)."""
            gap = (child.record.gap_s or 0.0) * load.gap_scale
            intended = time.perf_counter() + gap
            await asyncio.sleep(gap)
            excluded = WARMUP if after == WARMUP else budget.take(intended)
            if budget.over.is_set():
                return
            await one(intended, excluded, child)

        async def conversation(intended: float) -> None:
            await self._session(http, block, intended, budget, level)

        async def dispatch() -> None:
            for offset, replayed in offsets(load, self.rng):
                intended = start + offset
                if budget.end is not None and intended > budget.end:
                    # a slow schedule must not keep the block open past its end
                    while (now := time.perf_counter()) < budget.end:
                        await asyncio.sleep(budget.end - now)  # timers may fire a bit early
                    budget.check()
                delay = intended - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.workload.turns > 1:  # an arrival is a conversation's start
                    if budget.over.is_set():
                        return
                    spawn(conversation(intended))
                    continue
                excluded = budget.take(intended)
                if budget.over.is_set():
                    return
                spawn(one(intended, excluded, replayed))
            budget.check()  # a trace ends: its last measured requests still run
            await budget.over.wait()

        tasks: set[asyncio.Task[None]] = set()

        def spawn(coro: Coroutine[Any, Any, None]) -> None:
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        try:
            await run_until(budget.over, [dispatch()], self._wind_down(budget))
        finally:
            await cancel(tasks)

    async def _wind_down(self, budget: Budget) -> None:
        """The block is over: scrape the servers as its window closes, then cut the cooldown
        requests still in flight and wait for their records, so every request sent is one
        (cancelled, they would have reached the server and left no trace). An interrupted
        block cancels them instead: Ctrl-C ends the run now."""
        await self._servers.closing(budget)
        if budget.interrupted:
            return
        for cutoff in self._flying:
            cutoff.now()
        if self._sending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._landed.wait(), WIND_DOWN_S)

    async def _watch_loop(self) -> None:
        samples = self.result.loop_lag
        while True:
            before = time.perf_counter()
            await asyncio.sleep(LOOP_LAG_INTERVAL_S)
            after = time.perf_counter()
            lag = max(0.0, after - before - LOOP_LAG_INTERVAL_S)
            samples.append((self.clock.epoch(after), lag))
