"""--workers N: N processes serve the main port, one supervisor serves the admin port.

Each worker listens on a socket of its own, all bound to the main port with SO_REUSEPORT
(the kernel spreads connections among them, as with nginx's `worker_processes` and
`reuseport`). The supervisor keeps those sockets: a worker that dies is started again on
its socket, and the connections the kernel queued there meanwhile wait for it instead of
being reset. The supervisor's /metrics sums the workers' shared-memory stores (merged.py);
/readyz says ready only once every worker serves, and names those that do not; SIGTERM
drains every worker, then the supervisor ends. A worker whose heartbeat stops (SIGSTOP, a
loop stuck) is named unready, killed and started again, as gunicorn's worker timeout does.

A worker that dies is started again at once if it had served; one that dies again before
it serves is started later and later (exponential backoff, capped, reset once it serves),
as Kubernetes' CrashLoopBackOff and systemd's RestartSteps= do, while the others serve on.
Only a worker that ends before any worker of the proxy ever served ends the supervisor (a
fault at start, such as a bad setting, would not mend by starting it again and again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import uvloop

from latency_proxy.base import semconv as sc
from latency_proxy.base.config import Settings
from latency_proxy.process.admin import create_admin_app
from latency_proxy.process.serving import admin_server, bind, bind_shared, log_listening
from latency_proxy.process.state import ProxyState
from latency_proxy.telemetry.providers import Telemetry, exposition
from latency_proxy.telemetry.worker_store import records
from latency_proxy.upstream.routes import Upstreams
from latency_proxy.workers import merged
from latency_proxy.workers.worker import run_worker

log = logging.getLogger("latency_proxy.workers")
STOP_GRACE = 5.0  # past --drain-timeout, how long a worker may take to end before SIGKILL
HEARTBEAT_TIMEOUT_S = 2.0  # a serving worker silent this long is stuck (it beats every 0.5 s)
WATCH_INTERVAL_S = 0.5  # how often the supervisor looks: stuck ones go within 2.5 s
RESTART_BACKOFF_S = 0.1  # after the first death before serving (systemd's RestartSec=)
RESTART_BACKOFF_CAP_S = 5.0  # connections the kernel queues for it wait this long at most


def restart_delay(early_deaths: int) -> float:
    """How long before a worker that died `early_deaths` times in a row before it served
    is started again: at once after one that had served, then 0.1 s doubling to the cap."""
    if early_deaths == 0:
        return 0.0
    return min(RESTART_BACKOFF_CAP_S, RESTART_BACKOFF_S * 2 ** min(early_deaths - 1, 32))


@dataclass(slots=True)
class Worker:
    number: int
    process: BaseProcess
    messages: Connection
    store: Path  # named until the supervisor has it open, then removed: nothing to leak
    store_fd: int | None = None  # the store, open for reading, once the worker is ready
    ready: bool = False
    heard_at: float = 0.0  # the loop's time of its latest heartbeat


class SummedTelemetry(Telemetry):
    """The supervisor's telemetry: no exporters of its own (the workers export), and a
    /metrics that is the sum of the workers' stores."""

    def __init__(self, settings: Settings, supervisor: Supervisor) -> None:
        opt_in = os.environ.get(sc.OPT_IN_VARIABLE, "")
        super().__init__(
            [r.name for r in settings.routes],
            settings.provider_name,
            env={sc.OPT_IN_VARIABLE: opt_in},
        )
        self._supervisor = supervisor

    def exposition(self, accept: str) -> tuple[bytes, str]:
        s = self._supervisor
        live = [records(w.store_fd) for w in s.workers.values() if w.store_fd is not None]
        return exposition(s.merged.registry(live, s.restarts), accept)


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        flags: dict[str, Any],
        credentials: dict[str, str],
        token: str | None,
        open_files: tuple[int, int],
    ) -> None:
        self.settings = settings
        self._open_files = open_files
        self._flags = flags
        self.sockets = bind_shared(settings.host, settings.port, settings.workers)
        self.admin_socket = bind(settings.admin_host, settings.admin_port)
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        self._stores = Path(shm) / f"latency-proxy-{os.getpid()}"  # a prefix per supervisor
        self.workers: dict[int, Worker] = {}
        self.restarts = 0
        self._served = False  # a worker of this proxy has served: a fault is no start fault
        self._early_deaths: dict[int, int] = {}  # worker number: deaths in a row before serving
        self._restart_at: dict[int, float] = {}  # worker number: when its backoff ends
        self._started = 0  # workers started, restarts included: names their stores
        self._context = multiprocessing.get_context("spawn")
        self._failed = False
        self._ended = asyncio.Event()
        telemetry = SummedTelemetry(settings, self)
        self.merged = merged.Merged(telemetry.latest_gen_ai)
        self.state = ProxyState(
            settings,
            telemetry,
            Upstreams(settings, credentials),
            admin_token=token,
            workers_unready=self.unready,
        )

    def unready(self) -> dict[str, str]:
        """Each worker that does not serve now, and why (/readyz)."""
        now = asyncio.get_running_loop().time()
        why = {}
        for number in range(self.settings.workers):
            worker = self.workers.get(number)
            if number in self._restart_at:
                why[str(number)] = f"restarting in {self._restart_at[number] - now:.1f}s"
            elif worker is None or not worker.ready:
                why[str(number)] = "starting"
            elif now - worker.heard_at > HEARTBEAT_TIMEOUT_S:
                why[str(number)] = f"not answering for {now - worker.heard_at:.1f}s"
        return why

    def serve(self) -> int:
        """Run the workers until SIGTERM or SIGINT; the exit code."""
        return uvloop.run(self.run())

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        await self.state.upstreams.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.drain, sig)
        for number in range(self.settings.workers):
            self._start(number)
        loop.call_later(WATCH_INTERVAL_S, self._watch)
        admin = admin_server(self.settings, create_admin_app(self.state))
        admin_task = asyncio.create_task(admin.serve(sockets=[self.admin_socket]))
        log_listening(self.settings, self.sockets[0], self.admin_socket, self._open_files)
        try:
            await self._ended.wait()
        finally:
            admin.should_exit = True
            await admin_task
            await self.state.upstreams.close()
        return 1 if self._failed else 0

    def _start(self, number: int) -> None:
        loop = asyncio.get_running_loop()
        messages, ready = self._context.Pipe(duplex=False)
        self._started += 1
        store = Path(f"{self._stores}-worker-{number}-{self._started}")
        process = self._context.Process(
            target=run_worker,
            args=(self._flags, number, self.sockets[number], ready, str(store), os.getpid()),
            name=f"latency-proxy-worker-{number}",
        )
        process.start()
        ready.close()
        worker = Worker(number, process, messages, store)
        self.workers[number] = worker
        loop.add_reader(messages.fileno(), self._heard, worker)
        loop.add_reader(process.sentinel, self._ended_worker, worker)

    def _heard(self, worker: Worker) -> None:
        try:
            worker.messages.recv_bytes()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(worker.messages.fileno())
            return
        worker.heard_at = asyncio.get_running_loop().time()
        if not worker.ready:  # it serves, so its store exists: open it, let go of its name
            worker.store_fd = os.open(worker.store, os.O_RDONLY)
            worker.store.unlink(missing_ok=True)
            worker.ready = True
            self._served = True
            self._early_deaths.pop(worker.number, None)
            log.info("worker ready", extra={"fields": {"worker": worker.number}})

    def _ended_worker(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker.process.sentinel)
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(worker.messages.fileno())
        worker.messages.close()
        worker.process.join()
        del self.workers[worker.number]
        if worker.store_fd is not None:  # what it counted stays; its store goes
            self.merged.fold_dead(records(worker.store_fd))
            os.close(worker.store_fd)
        worker.store.unlink(missing_ok=True)
        code = worker.process.exitcode
        fields: dict[str, object] = {"worker": worker.number, "exit_code": code}
        if self.state.draining:
            if not self.workers:
                self._ended.set()
            return
        if not self._served:
            log.error("worker ended before it served; stopping", extra={"fields": fields})
            self._failed = True
            self.drain(signal.SIGTERM)
            return
        self.restarts += 1
        deaths = 0 if worker.ready else self._early_deaths.get(worker.number, 0) + 1
        self._early_deaths[worker.number] = deaths
        delay = restart_delay(deaths)
        fields["restart_in_s"] = delay
        log.warning("worker ended; starting it again", extra={"fields": fields})
        if delay == 0:
            self._start(worker.number)
            return
        self._restart_at[worker.number] = loop.time() + delay
        loop.call_later(delay, self._restart, worker.number)

    def _watch(self) -> None:
        """Kill each serving worker whose heartbeat stopped; its end starts a new one."""
        loop = asyncio.get_running_loop()
        if self.state.draining:
            return
        loop.call_later(WATCH_INTERVAL_S, self._watch)
        for worker in self.workers.values():
            silent = loop.time() - worker.heard_at
            if worker.ready and silent > HEARTBEAT_TIMEOUT_S and worker.process.is_alive():
                fields = {"worker": worker.number, "silent_s": round(silent, 1)}
                log.error("worker stopped answering; killing it", extra={"fields": fields})
                worker.process.kill()

    def _restart(self, number: int) -> None:
        del self._restart_at[number]
        if not self.state.draining:
            self._start(number)

    def drain(self, sig: int) -> None:
        """Every worker drains (--drain-timeout), then the supervisor ends."""
        if self.state.draining:
            return
        self.state.draining = True
        log.info("draining", extra={"fields": {"signal": int(sig)}})
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid or 0, signal.SIGTERM)
        if not self.workers:
            self._ended.set()
            return
        asyncio.get_running_loop().call_later(
            self.settings.drain_timeout + STOP_GRACE, self._kill_stragglers
        )

    def _kill_stragglers(self) -> None:
        for worker in self.workers.values():
            fields = {"worker": worker.number}
            log.warning("worker did not end; killing it", extra={"fields": fields})
            worker.process.kill()
