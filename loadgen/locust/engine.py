"""loadgen's workload and measurements as a Locust engine (`locust -f loadgen/locustfile.py`).

For teams whose load testing runs on Locust: `LoadgenUser` (user.py) sends loadgen's
requests, as Locust custom arguments with loadgen's names ask (options.py), and each is
measured with measurement.py, as loadgen's own client measures it, and fired into Locust's
table (table.py). Here: the `Node` that runs users in a process (its workload, window, outbox,
lag timer and replay share), the `Engine` of each Locust process, and the event wiring. The
master (or the single process) writes one loadgen run directory at the end: requests.jsonl,
summary.json, report.md, from the same code, so `loadgen compare` puts a Locust run beside a
loadgen run.

Timing is kept honest under gevent as loadgen keeps it under asyncio: t0 is the moment
Locust meant the request to go (the end of the user's wait_time: for a closed-loop user the
moment its last response ended), every record carries its send lag, and a timer greenlet
samples the worker's scheduling lag; summary.py's rule marks the run invalid when either
says the worker was the bottleneck. In distributed mode each worker streams its records to
the master over Locust's messaging (`loadgen_records`); when the test stops the master
closes every worker's measured window (`loadgen_close`) and waits for their last batches
(locust/window.py says what counts).

A replay (--replay FILE) is open loop, as loadgen's: the users stand aside and each node sends
its share of the trace's window itself, every record at its own offset on a greenlet of its
own, however many are in flight. Every node loads the window and says so (`loadgen_ready`,
with the file's sha256); once all have, the master names one start, in epoch seconds, and
each node's share, i of N in worker-index order (`loadgen_start`): every Nth record, as
loadgen's shards take them, so the merged run is the run one client would have made. A
node's records are due at start + offset (latency counts from then); it sends its last batch
when they are all answered, and the master ends the test once every node has.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import gevent
import gevent.event
import locust
import numpy as np
from locust import events
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from loadgen import replay
from loadgen.locust.client import StreamingClient
from loadgen.locust.options import Options, add_arguments
from loadgen.locust.run import Collector, Final, Outbox, Roster, write
from loadgen.locust.table import fire
from loadgen.locust.window import Window
from loadgen.measurement import Clock, Measurement
from loadgen.records import Record
from loadgen.runner import LOOP_LAG_INTERVAL_S
from loadgen.sizing import calibrate
from loadgen.targets import Target, resolve
from loadgen.workload import Sizing, Workload, load_dataset, shared_prefix, user_messages

RECORDS = "loadgen_records"  # node -> master: a batch of records, lag samples, a last word
CLOSE = "loadgen_close"  # master -> nodes: the test is stopping, close the measured window
READY = "loadgen_ready"  # node -> master: its replay's window is loaded (or why not)
START = "loadgen_start"  # master -> node: the replay's start (epoch s) and the node's share
START_MARGIN_S = 1.0  # the last node's ready to a distributed replay's start: room for the word
SHIP_INTERVAL_S = 1.0  # how often a worker streams what it measured to the master
LOCUSTFILE = Path(__file__).parent.parent / "locustfile.py"
log = logging.getLogger("loadgen.locust")


class Node:
    """A process that runs users, for one test: its workload, window, outbox and lag timer."""

    def __init__(self, environment: Environment, options: Options) -> None:
        if not environment.host:
            raise ValueError("loadgen.locust: no target: give --host URL (the server, no /v1)")
        runner = environment.runner
        assert runner is not None
        self.environment = environment
        self.options = options
        self.target: Target = resolve(environment.host)
        self.index = runner.worker_index
        self.worker = runner.client_id
        setup = StreamingClient(self.target, options.timeout_s)
        self.model = options.model or self.target.model or setup.first_model()
        if self.model is None:
            raise ValueError(f"loadgen.locust: {self.target.url}: no --model, none at /v1/models")
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
        self.helpers = [gevent.spawn(self._watch_lag)]
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
        http.send(self.workload.path, self._body(arrival), m)
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
        cooldown), seal it, let the rest end, then send the last batch. Once, whoever asks
        first; the others wait for it."""
        if self.window.closed_at is not None:
            self.done.wait()
            return
        self.window.close(time.perf_counter())
        deadline = time.monotonic() + self.options.timeout_s
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


def trace_window(options: Options, limit: int | None) -> replay.Replay:
    """The replay's window as loadgen takes it: loaded, then fitted to the model's context
    (`limit` tokens, None: unknown); ValueError naming the file (and line) when it is bad."""
    assert options.replay is not None
    trace = replay.load(options.replay, options.duration_s, options.requests)
    return trace if limit is None else replay.fit(trace, limit, options.replay)


def check_options(environment: Environment) -> None:
    """A bad flag or trace stops the master (or the single process) before any load, as it
    stops loadgen: `loadgen.locust: FILE:LINE: reason`, exit 2. (Workers, which get the
    flags with the test's start, check their trace then: a bad one ends the test, exit 2.)"""
    ns = environment.parsed_options
    if isinstance(environment.runner, WorkerRunner) or ns is None:
        return
    try:
        options = Options.of(ns)
        if options.replay is None:
            return
        limit = None
        if environment.host:
            target = resolve(environment.host)
            http = StreamingClient(target, options.timeout_s)
            model = options.model or target.model or http.first_model()
            limit = http.context_length(model) if model else None
            http.close()
        trace_window(options, limit)
    except ValueError as exc:
        print(f"loadgen.locust: {exc}", file=sys.stderr)
        sys.exit(2)


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


class Engine:
    """One per Locust process: a node's measuring and, on the master, the collecting."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.node: Node | None = None
        self.collector = Collector()
        self.expected: set[str] = set()
        self.started_at = time.time()
        self.roster: Roster | None = None  # a replay's nodes
        self.stopping = False  # the test is stopping: a replay's end need not stop it
        self.aborted = False  # a node could not replay: nothing to write

    @property
    def measures(self) -> bool:
        return not isinstance(self.environment.runner, MasterRunner)

    @property
    def collects(self) -> bool:
        return not isinstance(self.environment.runner, WorkerRunner)

    def register(self) -> None:
        runner = self.environment.runner
        assert runner is not None
        if self.collects:
            runner.register_message(RECORDS, self.on_records)
            runner.register_message(READY, self.on_ready)
            ns = self.environment.parsed_options
            if ns is not None and ns.prompt_seed is None:  # workers get it with the spawn
                ns.prompt_seed = secrets.randbits(63)
        if self.measures:
            runner.register_message(CLOSE, self.on_close, concurrent=True)
            runner.register_message(START, self.on_start)

    def on_test_start(self) -> None:
        runner = self.environment.runner
        assert runner is not None
        options = Options.of(self.environment.parsed_options)
        if self.collects:
            self.collector = Collector()
            self.started_at = time.time()
            self.stopping = self.aborted = False
            self.roster = Roster(self._nodes()) if options.replay else None
        if not self.measures:
            return
        try:
            self.node = Node(self.environment, options)
        except ValueError as exc:
            if options.replay is None:
                raise
            runner.send_message(READY, {"error": str(exc)})
            return
        if self.node.trace is not None:
            sha256 = self.node.trace.meta["sha256"]
            runner.send_message(READY, {"index": runner.worker_index, "sha256": sha256})

    def _nodes(self) -> set[str]:
        """The nodes a test starts: the master's connected workers, or the single process."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            return {
                c.id
                for c in runner.clients.ready + runner.clients.running + runner.clients.spawning
            }
        return {"local"}

    def on_ready(self, environment: Environment, msg: Any) -> None:
        """A node has its replay's window (or says why not); once all have, start them all
        at one moment, each with its share."""
        runner = self.environment.runner
        if self.roster is None or self.stopping or runner is None:
            return
        try:
            if error := msg.data.get("error"):
                raise ValueError(error)
            shares = self.roster.ready(msg.node_id, msg.data["index"], msg.data["sha256"])
        except ValueError as exc:
            log.error("loadgen.locust: %s: %s", msg.node_id, exc)
            self.environment.process_exit_code = 2
            self.aborted = True
            gevent.spawn(self._end)
            return
        if shares is None:
            return
        at = time.time() + (START_MARGIN_S if isinstance(runner, MasterRunner) else 0.0)
        for node, (share, count) in shares.items():
            runner.send_message(START, {"at": at, "share": [share, count]}, client_id=node)

    def on_start(self, environment: Environment, msg: Any) -> None:
        if self.node is not None and self.node.trace is not None:
            share, count = msg.data["share"]
            self.node.start_replay(msg.data["at"], share, count)

    def _end(self) -> None:
        """A replay is over (or cannot start): end the test as Locust's --run-time ends it,
        quitting when headless, else stopping (the web UI stays up)."""
        runner = self.environment.runner
        ns = self.environment.parsed_options
        if self.stopping or runner is None:
            return
        if ns is not None and ns.headless:
            runner.quit()
        else:
            runner.stop()

    def on_test_stopping(self) -> None:
        self.stopping = True
        runner = self.environment.runner
        assert runner is not None
        if isinstance(runner, MasterRunner):
            self.expected = {c.id for c in runner.clients.all if c.state != "missing"}
        elif self.collects:
            self.expected = {"local"}
        if self.collects:
            runner.send_message(CLOSE)
        if self.node is not None:
            self.node.finish()  # a worker stopped by its master: close and drain first

    def on_close(self, environment: Environment, msg: Any) -> None:
        if self.node is None:
            self.environment.runner.send_message(RECORDS, Outbox().batch(Final(phase=None)))
        else:
            self.node.finish()

    def on_records(self, environment: Environment, msg: Any) -> None:
        self.collector.add(msg.node_id, msg.data)
        if self.roster is not None and self.roster.expected <= self.collector.finals.keys():
            gevent.spawn(self._end)  # every node has sent its share of the replay

    def on_test_stop(self) -> None:
        if self.node is not None:
            self.node.finish()
            self.node = None
        if not self.collects:
            return
        options = Options.of(self.environment.parsed_options)
        deadline = time.monotonic() + options.timeout_s + 10
        while not self.expected <= set(self.collector.finals) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        missing = self.expected - set(self.collector.finals)
        if missing:
            log.warning("loadgen.locust: no last batch from %s: their records are missing", missing)
        self._write(options)

    def _write(self, options: Options) -> None:
        if self.aborted:
            return
        finals = list(self.collector.finals.values())
        if not any(f.phase for f in finals):
            log.warning("loadgen.locust: no node measured anything: no run directory")
            return
        first = next(f for f in finals if f.phase is not None)
        out = options.out or Path("loadgen-runs") / time.strftime("%Y%m%d-%H%M%S")
        data = self.collector.run_data(options.summary, self._meta(options, first))
        summary = write(out, data)
        from loadgen.report import console_table  # as write's: workers never import it

        print(console_table(summary))
        print(
            f"loadgen.locust: results: {out}/"
            " (summary.json, requests.jsonl, report.md, report.html)"
        )

    def _meta(self, options: Options, first: Final) -> dict[str, Any]:
        """run.json's meta as loadgen writes it, plus what Locust ran."""
        runner = self.environment.runner
        host = self.environment.host or ""
        target = resolve(host)
        return {
            "command": "locust " + shlex.join(sys.argv[1:]),
            "started_at": self.started_at,
            "targets": {target.name: {"url": target.url, "model": first.model}},
            "endpoint": options.endpoint,
            "sweep": "replay" if options.replay else None,
            "levels": [options.replay.speed] if options.replay else [],
            "shard": [0, 1],
            "prompt_sizing": first.prompt_sizing,
            "trace_url": options.trace_url,
            "prompts": {
                "seed": options.prompt_seed,
                "shared_prefix_tokens": options.shared_prefix_tokens,
            },
            "engine": {
                "name": "locust",
                "version": locust.__version__,
                "users": getattr(runner, "target_user_count", None),
                "nodes": sorted(self.collector.finals),
            },
        } | ({"replay": first.replay} if first.replay is not None else {})


ENGINES: dict[Environment, Engine] = {}


@events.init_command_line_parser.add_listener
def _on_parser(parser: LocustArgumentParser, **_: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    # gevent's loop caches "now": after the imports of the locustfile (numpy, matplotlib) it is
    # seconds old, and every timer set before the loop next runs (--run-time's among them)
    # would fire that much early
    gevent.get_hub().loop.update_now()
    check_options(environment)
    engine = ENGINES[environment] = Engine(environment)
    engine.register()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    ENGINES[environment].on_test_start()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_: Any) -> None:
    ENGINES[environment].on_test_stopping()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    ENGINES[environment].on_test_stop()


def main(argv: list[str] | None = None) -> NoReturn:
    """`python -m loadgen.locust ARGS`: Locust itself, with the ready locustfile."""
    args = sys.argv[1:] if argv is None else argv
    os.execv(sys.executable, [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args])
