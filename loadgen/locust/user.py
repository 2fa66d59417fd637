"""`LoadgenUser`, the Locust user that sends loadgen's requests (its node fires the request
events of Locust's table, table.py)."""

from __future__ import annotations

import time

from locust import User, constant, task
from locust.env import Environment
from locust.exception import StopUser

from loadgen.locust.client import StreamingClient
from loadgen.locust.engine import ENGINES


class LoadgenUser(User):
    """A Locust user sending loadgen's requests. Closed loop as it is (wait_time constant(0):
    the next request goes when the last response ended; --users N is loadgen's
    --concurrency N); subclass with `wait_time = constant_throughput(r)` for paced users (N
    users at r/s each approach --rate N·r open loop while each response ends inside 1/r).
    With --replay the trace sets the load, not the users: they stand aside (StopUser)."""

    abstract = True
    wait_time = constant(0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        chosen = self.wait_time
        self._intended = time.perf_counter()

        def wait_time() -> float:
            """Locust's wait, and where it ends: the next request's intended send time."""
            delay = chosen()
            self._intended = time.perf_counter() + delay
            return delay

        self.wait_time = wait_time  # type: ignore[method-assign]  # Locust calls self.wait_time()
        self._http: StreamingClient | None = None

    def on_start(self) -> None:
        self._intended = time.perf_counter()

    def on_stop(self) -> None:
        if self._http is not None:
            self._http.close()

    @task
    def stream(self) -> None:
        node = ENGINES[self.environment].node
        if node is None:
            return
        if node.trace is not None:
            raise StopUser()  # the node sends the trace's records, each at its own time
        if self._http is None:
            self._http = node.client()
        node.measure(self._http, self._intended)
