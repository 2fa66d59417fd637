"""The tests' scripted upstream: loadgen.sim in fixed timing with a script
(loadgen/sim/wire/script.py).

Two ways to run it: `serve()` in this process on a thread, for the proxy's tests, which read
what it received; `running()` as its own process, for loadgen's, so the client under test
has the machine's other core. Either way each request may carry its own script in the
`x-script` header, and `control()` changes the server's for later requests.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.connection import HttpProtocol
from loadgen.sim.wire.script import Received, Scripting
from loadgen.stack.processes import free_port, simulator

MODEL = "scripted"
# What the proxy's tests expect of every answer unless a request scripts otherwise: five
# tokens of "tok ", seven prompt tokens, and a header the proxy does not know (kept).
PROXY_SCRIPT = {
    "tokens": 5,
    "text": "tok ",
    "prompt_tokens": 7,
    "headers": {"x-upstream-unknown": "kept"},
}


class ServerThread:
    """Runs an ASGI app under uvicorn on a loopback port in a background thread; `options`
    are uvicorn.Config's (TLS files, or another loop and keep-alive)."""

    def __init__(self, app: Any, port: int, **options: Any) -> None:
        defaults: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": port,
            "log_level": "critical",
            "lifespan": "on",
            "loop": "asyncio",
            "http": HttpProtocol,  # httptools, handing the simulator's faults the connection
        }
        self.config = uvicorn.Config(app, **(defaults | options))
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("upstream did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@dataclass
class Upstream:
    """A scripted simulator serving in this process: its URL and what it received."""

    url: str
    scripting: Scripting
    fingerprint: str  # the system_fingerprint its answers carry

    @property
    def received(self) -> list[Received]:
        return self.scripting.received

    @property
    def disconnects(self) -> list[tuple[str, float]]:
        """(X-Request-Id, perf_counter time) of each client that went away mid-response."""
        return self.scripting.disconnects


@contextlib.contextmanager
def serve(script: dict[str, Any] = PROXY_SCRIPT, **tls: str) -> Iterator[Upstream]:
    """A scripted simulator on a thread (zero TTFT and ITL unless scripted); https with `tls`
    (uvicorn's ssl_certfile, ssl_keyfile)."""
    app = create_app(ttft=0.0, itl=0.0, served_model_name=MODEL, script=script)
    sim = app.state.sim
    port = free_port()
    scheme = "https" if tls else "http"
    with ServerThread(app, port, **tls):
        yield Upstream(f"{scheme}://127.0.0.1:{port}", sim.scripting, sim.fingerprint)


def running(
    ttft: float, itl: float, script: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[str]:
    """`python -m loadgen.sim --ttft --itl [--script]` as a child process; yields its URL.
    Without a script it is the plain fixed mode users run."""
    timing = ["--ttft", str(ttft), "--itl", str(itl)]
    if script is not None:
        timing += ["--script", json.dumps(script), "--served-model-name", MODEL]
    return simulator(*timing)


def control(url: str, **script: Any) -> None:
    """Change the running upstream's script for later requests (loadgen/sim/wire/script.py)."""
    request = urllib.request.Request(
        url + "/control", data=json.dumps(script).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def arrivals(url: str) -> list[dict]:
    """The generation requests so far: {"at": epoch seconds, "id": X-Request-Id}."""
    with urllib.request.urlopen(url + "/arrivals", timeout=5) as resp:
        return json.loads(resp.read())
