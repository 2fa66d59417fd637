"""loadgen's workload and measurements as a Locust engine (`locust -f loadgen/locustfile.py`).

For teams whose load testing runs on Locust: `LoadgenUser` (user.py) sends loadgen's
requests, as Locust custom arguments with loadgen's names ask (options.py), and each is
measured with measurement.py, as loadgen's own client measures it. Here: the `Node` that runs
users in a process (its workload, window, outbox and lag timer), the `Engine` of each Locust
process, and the event wiring. The master (or the single process) writes one loadgen run
directory at the end: requests.jsonl, summary.json, report.md, from the same code, so
`loadgen compare` puts a Locust run beside a loadgen run.

Timing is kept honest under gevent as loadgen keeps it under asyncio: t0 is the moment
Locust meant the request to go (the end of the user's wait_time: for a closed-loop user the
moment its last response ended), every record carries its send lag, and a timer greenlet
samples the worker's scheduling lag; summary.py's rule marks the run invalid when either
says the worker was the bottleneck. In distributed mode each worker streams its records to
the master over Locust's messaging (`loadgen_records`); when the test stops the master
closes every worker's measured window (`loadgen_close`) and waits for their last batches
(locust/window.py says what counts).
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

from loadgen.locust.client import StreamingClient
from loadgen.locust.options import Options, add_arguments
from loadgen.locust.run import Collector, Final, Outbox, write
from loadgen.locust.window import Window
from loadgen.measurement import Clock, Measurement
from loadgen.records import Record
from loadgen.runner import LOOP_LAG_INTERVAL_S
from loadgen.sizing import calibrate
from loadgen.targets import Target, resolve
from loadgen.workload import Sizing, Workload, load_dataset, shared_prefix, user_messages

RECORDS = "loadgen_records"  # node -> master: a batch of records, lag samples, a last word
CLOSE = "loadgen_close"  # master -> nodes: the test is stopping, close the measured window
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
        self.helpers = [gevent.spawn(self._watch_lag)]
        if isinstance(runner, WorkerRunner):
            self.helpers.append(gevent.spawn(self._ship))

    def client(self) -> StreamingClient:
        return StreamingClient(self.target, self.options.timeout_s)

    def measure(self, http: StreamingClient, intended: float) -> Record:
        """One request intended at `intended` (perf_counter), streamed and recorded; once the
        window is sealed the user stops instead (Locust's StopUser)."""
        if self.window.sealed:
            raise StopUser()
        excluded = self.window.take(intended)
        m = Measurement(self.target, intended, stall_threshold_s=self.options.stall_threshold_s)
        http.send(self.workload.path, self.workload.body(self.model), m)
        end = time.perf_counter()
        record = m.record(end, self.clock)
        record.excluded, record.shard, record.worker = excluded, self.index, self.worker
        self.window.finished(excluded, end)
        self.outbox.records.append(record)
        return record

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
        gevent.killall(self.helpers)
        final = Final(
            phase=self.window.phase(self.target.name, self.clock),
            model=self.model,
            prompt_sizing=self.sizing,
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
            ns = self.environment.parsed_options
            if ns is not None and ns.prompt_seed is None:  # workers get it with the spawn
                ns.prompt_seed = secrets.randbits(63)
        if self.measures:
            runner.register_message(CLOSE, self.on_close, concurrent=True)

    def on_test_start(self) -> None:
        if self.collects:
            self.collector = Collector()
            self.started_at = time.time()
        if self.measures:
            self.node = Node(self.environment, Options.of(self.environment.parsed_options))

    def on_test_stopping(self) -> None:
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
            "sweep": None,
            "levels": [],
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
        }


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
