"""The `Node`: what one Locust process (the single one, or each worker) runs of loadgen.

Its workload, measured window, outbox and lag timer, and its share of a replay: every Nth
record of the trace's window, each sent at start + its offset on a greenlet of its own
(engine.py says how the master names the start and the shares). Its records stream to the
master (`loadgen_records`) or, in a single process, straight to the collector.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import numpy as np
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import LocalRunner, WorkerRunner

from loadgen import replay
from loadgen.analysis.records import Record
from loadgen.engine.dataset import load_dataset
from loadgen.engine.measurement import Clock, Measurement
from loadgen.engine.runner import LOOP_LAG_INTERVAL_S
from loadgen.engine.sizing import calibrate
from loadgen.engine.targets import Target, resolve
from loadgen.engine.window import drain_s
from loadgen.engine.workload import Workload
from loadgen.inputs.prompt_text import Sizing, shared_prefix, user_messages
from loadgen.locust.client import Cut, StreamingClient
from loadgen.locust.options import Options
from loadgen.locust.run import Final, Outbox
from loadgen.locust.table import fire
from loadgen.locust.window import Window

RECORDS = "loadgen_records"  # node -> master: a batch of records, lag samples, a last word
CLOSE = "loadgen_close"  # master -> nodes: the test is stopping, close the measured window
READY = "loadgen_ready"  # node -> master: its replay's window is loaded (or why not)
START = "loadgen_start"  # master -> node: the replay's start (epoch s) and the node's share
SHIP_INTERVAL_S = 1.0  # how often a worker streams what it measured to the master


def trace_window(options: Options, limit: int | None) -> replay.Replay:
    """The replay's window as loadgen takes it: loaded, then fitted to the model's context
    (`limit` tokens, None: unknown); ValueError naming the file (and line) when it is bad."""
    assert options.replay is not None
    trace = replay.load(options.replay, options.duration_s, options.requests)
    return trace if limit is None else replay.fit(trace, limit, options.replay)


def _prompt_sizing(options: Options, http: StreamingClient, model: str) -> Sizing:
    """sizing.calibrate against a local tokenizer, else the target's /tokenize (blocking
    calls under gevent: the coroutine never waits, so asyncio just runs it through)."""
    if options.tokenizer:
        from tokenizers import Tokenizer  # optional: only for --tokenizer

        encoder = Tokenizer.from_file(options.tokenizer)
        count: Callable[[str], int | None] = lambda text: len(encoder.encode(text).ids)  # noqa: E731
        source = "tokenizer"
    elif options.endpoint == "chat":
        count = lambda text: http.count_tokens(model, messages=user_messages(text))  # noqa: E731
        source = "tokenize"
    else:
        count = lambda text: http.count_tokens(model, prompt=text)  # noqa: E731
        source = "tokenize"

    async def counted(text: str) -> int | None:
        return count(text)

    return asyncio.run(calibrate(counted, options.input_tokens.mean, source)) or Sizing()


class Node:
    """A process that runs users, for one test: its workload, window, outbox and lag timer."""

    def __init__(self, environment: Environment, options: Options) -> None:
        if not environment.host:
            raise ValueError("loadgen.locust: no target: give --host URL (the server, no /v1)")
        runner = environment.runner
        assert isinstance(runner, LocalRunner | WorkerRunner), "only the master does not measure"
        self.environment = environment
        self.options = options
        self.target: Target = resolve(environment.host)
        self.index = runner.worker_index
        self.worker = runner.client_id
        setup = StreamingClient(self.target, options.timeout_s)
        model = options.model or self.target.model or setup.first_model()
        if model is None:
            raise ValueError(f"loadgen.locust: {self.target.url}: no --model, none at /v1/models")
        self.model = model
        sizing = Sizing() if options.dataset else _prompt_sizing(options, setup, self.model)
        self.sizing = None if options.dataset else sizing.meta()
        self.trace = (
            trace_window(options, setup.context_length(self.model)) if options.replay else None
        )
        self.book = (
            replay.PromptBook(sizing, options.prompt_seed, options.replay.block_tokens)
            if options.replay
            else None
        )
        setup.close()
        self.workload = Workload(
            endpoint=options.endpoint,
            input_tokens=options.input_tokens,
            output_tokens=options.output_tokens,
            rng=np.random.default_rng([options.summary.seed, self.index]),
            dataset=load_dataset(options.dataset) if options.dataset else None,
            sizing=sizing,
            temperature=options.temperature,
            ignore_eos=options.ignore_eos,
            prompt_rng=np.random.default_rng([options.prompt_seed, self.index]),
            shared=shared_prefix(
                options.shared_prefix_tokens, sizing, np.random.default_rng(options.prompt_seed)
            ),
        )
        self.clock = Clock()
        self.window = Window(time.perf_counter(), options.warmup_s)
        self.outbox = Outbox()
        self.done = gevent.event.Event()  # the last batch is sent
        self.idle: list[StreamingClient] = []  # a replay's connections, one per stream
        self.measuring: set[Any] = set()  # greenlets with a measured request in flight
        self.helpers: list[gevent.Greenlet[..., None]] = [gevent.spawn(self._watch_lag)]
        if isinstance(runner, WorkerRunner):
            self.helpers.append(gevent.spawn(self._ship))

    @property
    def level(self) -> float | None:
        """The run's level, as loadgen's: a replay's speed."""
        return self.options.replay.speed if self.options.replay else None

    def client(self) -> StreamingClient:
        return StreamingClient(self.target, self.options.timeout_s)

    def measure(self, http: StreamingClient, intended: float) -> Record:
        """One request intended at `intended` (perf_counter), streamed and recorded; once the
        window is sealed the user stops instead (Locust's StopUser)."""
        if self.window.sealed:
            raise StopUser()
        return self._stream(http, intended, self.window.take(intended))

    def start_replay(self, at: float, share: int, shares: int) -> None:
        """Send share i of N of the trace's window from `at` (epoch seconds, the master's)."""
        assert self.trace is not None, "a replay's node has its window"
        start = self.clock.perf(at)
        self.window = Window(start, self.options.warmup_s)
        self.index = share
        mine = replay.share(self.trace.arrivals, share, shares)
        self.helpers.append(gevent.spawn(self._replay, start, mine))

    def _replay(self, start: float, arrivals: list[replay.Arrival]) -> None:
        """Each record at start + its offset, on its own greenlet (open loop), then the end."""
        for arrival in arrivals:
            intended = start + arrival.offset_s
            while (delay := intended - time.perf_counter()) > 0:
                gevent.sleep(delay)  # again: a timer may fire a little early
            if self.window.sealed:
                return
            gevent.spawn(self._replayed, intended, self.window.take(intended), arrival)
        self.finish()

    def _replayed(self, intended: float, excluded: str | None, arrival: replay.Arrival) -> None:
        http = self.idle.pop() if self.idle else self.client()
        try:
            self._stream(http, intended, excluded, arrival)
        finally:
            self.idle.append(http)

    def _stream(
        self,
        http: StreamingClient,
        intended: float,
        excluded: str | None,
        arrival: replay.Arrival | None = None,
    ) -> Record:
        m = Measurement(self.target, intended, stall_threshold_s=self.options.stall_threshold_s)
        me = gevent.getcurrent()
        if excluded is None:
            self.measuring.add(me)  # the drain may cut it (finish)
        try:
            http.send(self.workload.path, self._body(arrival), m)
        finally:
            self.measuring.discard(me)
        end = time.perf_counter()
        record = m.record(end, self.clock)
        record.excluded, record.shard, record.worker = excluded, self.index, self.worker
        record.level = self.level
        if arrival is not None:
            record.replay_index = arrival.record.line
        self.window.finished(excluded, end)
        self.outbox.records.append(record)
        if excluded is None:
            fire(self.environment, record, self.workload.path)
        return record

    def _body(self, arrival: replay.Arrival | None) -> dict[str, Any]:
        if arrival is None:
            return self.workload.body(self.model)
        assert self.book is not None, "a replay has a prompt book"
        trace = arrival.record
        # a record's model wins unless --model is given, as in loadgen's replay
        model = trace.model if self.options.model is None and trace.model else self.model
        return self.workload.body(model, self.book.prompt(trace))

    def finish(self) -> None:
        """Close the window, let the measured requests in flight end (the users go on, as
        cooldown) for at most its drain, cut those still running (unfinished), seal it, let
        the rest end, then send the last batch. Once, whoever asks first; the others wait
        for it."""
        if self.window.closed_at is not None:
            self.done.wait()
            return
        self.window.close(time.perf_counter())
        assert self.window.closed_at is not None
        drain = drain_s(self.window.closed_at - self.window.warm_end, self.options.drain_s)
        self.window.drain_s = drain
        deadline = time.monotonic() + self.options.timeout_s
        self._until(lambda: self.window.drained, min(deadline, time.monotonic() + drain))
        for greenlet in list(self.measuring):
            greenlet.kill(Cut, block=False)
        self._until(lambda: self.window.drained, deadline)
        self.window.sealed = True
        self._until(lambda: self.window.idle, deadline)
        gevent.killall([g for g in self.helpers if g is not gevent.getcurrent()])
        for http in self.idle:
            http.close()
        final = Final(
            phase=self.window.phase(self.target.name, self.clock, self.level),
            model=self.model,
            prompt_sizing=self.sizing,
            replay=self.trace.meta if self.trace is not None else None,
        )
        self._send(final)
        self.done.set()

    @staticmethod
    def _until(condition: Callable[[], bool], deadline: float) -> None:
        while not condition() and time.monotonic() < deadline:
            gevent.sleep(0.01)

    def _send(self, final: Final | None = None) -> None:
        runner = self.environment.runner
        assert runner is not None
        runner.send_message(RECORDS, self.outbox.batch(final))

    def _ship(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            if self.outbox.records or self.outbox.lag:
                self._send()

    def _watch_lag(self) -> None:
        """The hub's scheduling lag: how late a timer greenlet wakes (loadgen's loop lag)."""
        while True:
            before = time.perf_counter()
            gevent.sleep(LOOP_LAG_INTERVAL_S)
            after = time.perf_counter()
            lag = max(0.0, after - before - LOOP_LAG_INTERVAL_S)
            self.outbox.lag.append((self.clock.epoch(after), lag))
