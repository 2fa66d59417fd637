"""loadgen's workload and measurements as a Locust engine (`locust -f loadgen/locustfile.py`).

For teams whose load testing runs on Locust: `LoadgenUser` (user.py) sends loadgen's
requests, as Locust custom arguments with loadgen's names ask (options.py), and each is
measured with measurement.py, as loadgen's own client measures it, and fired into Locust's
table (table.py). node.py has the `Node` that runs users in a process (its workload, window,
outbox, lag timer and replay share); here are the `Engine` of each Locust process and the
event wiring. The master (or the single process) writes one loadgen run directory at the
end: requests.jsonl, summary.json, report.md, from the same code, so `loadgen compare` puts
a Locust run beside a loadgen run.

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

import logging
import os
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import gevent
import gevent.event
import locust
from locust import events
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from loadgen.engine.targets import resolve
from loadgen.locust.client import StreamingClient
from loadgen.locust.node import CLOSE, READY, RECORDS, START, Node, trace_window
from loadgen.locust.options import Options, add_arguments
from loadgen.locust.run import Collector, Final, Outbox, Roster, write

START_MARGIN_S = 1.0  # the last node's ready to a distributed replay's start: room for the word
LOCUSTFILE = Path(__file__).parent.parent / "locustfile.py"
log = logging.getLogger("loadgen.locust")


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
            assert isinstance(runner, LocalRunner | WorkerRunner)  # it measures: not the master
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
            runner = self.environment.runner
            assert runner is not None
            runner.send_message(RECORDS, Outbox().batch(Final(phase=None)))
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
        from loadgen.reports.run import console_table  # as write's: workers never import it

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
