"""One worker process of several (--workers): the main port's server on a listening
socket its supervisor made, metric values in a shared-memory store its supervisor reads,
log lines naming it, and a word to the supervisor once it serves and every 0.5 s after."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import uvloop

from latency_proxy.base.config import (
    admin_token,
    load_settings,
    session_key,
    upstream_credentials,
)
from latency_proxy.process.app import ProxyApp
from latency_proxy.process.serving import keep_signals, main_server
from latency_proxy.telemetry.logs import configure
from latency_proxy.telemetry.redact import content_policy
from latency_proxy.telemetry.worker_store import Store

ALIVE = b"alive"  # the first says it serves, each after that its loop still runs
RESOURCE_VARIABLE = "OTEL_RESOURCE_ATTRIBUTES"
_PR_SET_PDEATHSIG = 1


def run_worker(
    flags: dict[str, Any],
    number: int,
    sock: socket.socket,
    ready: Connection,
    store: str,
    parent: int,
) -> None:
    """The worker's life: the same flags and environment as its supervisor, so the same
    settings, content policy, keys and hooks."""
    _end_with(parent)
    keep_signals()  # from the start: a drain asked while the worker starts is not lost
    _name_in_resource(number)
    settings = load_settings(flags)
    configure(settings.log_level, settings.log_format, worker=number)
    app = ProxyApp(
        settings,
        content_policy(settings),
        upstream_credentials(settings),
        admin_token(settings),
        Store(Path(store)),
        session_key(settings),
    )
    server = main_server(settings, app, heartbeat=_heartbeat(ready))
    uvloop.run(server.serve(sockets=[sock]))


def _heartbeat(pipe: Connection) -> Callable[[], None]:
    """One message to the supervisor; never waits: a full pipe (a supervisor that does not
    read) drops it, a broken one (a supervisor gone) is the kernel's SIGTERM to handle."""
    os.set_blocking(pipe.fileno(), False)

    def beat() -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            pipe.send_bytes(ALIVE)  # one write below PIPE_BUF: all of it or nothing

    return beat


def _name_in_resource(number: int) -> None:
    """OTLP metrics from several workers would share one resource and clash as one series;
    each worker's carry `latency_proxy.worker` (OTEL_RESOURCE_ATTRIBUTES, read by the SDK)."""
    given = os.environ.get(RESOURCE_VARIABLE, "")
    named = f"latency_proxy.worker={number}"
    os.environ[RESOURCE_VARIABLE] = f"{given},{named}" if given else named


def _end_with(parent: int) -> None:
    """A worker whose supervisor is gone (SIGKILL, OOM) drains and ends rather than serve
    on unwatched: the kernel sends it SIGTERM when its parent dies (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # gone already, before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
