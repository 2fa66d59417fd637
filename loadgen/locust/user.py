"""`LoadgenUser`, the Locust user that sends loadgen's requests, and the request events it
fires: Locust's table gets TTFT (the request's response time, and its failures), TPOT and E2E
per measured request, in ms."""

from __future__ import annotations

import time

from locust import User, constant, task
from locust.env import Environment

from loadgen.locust.client import StreamingClient
from loadgen.locust.engine import ENGINES
from loadgen.records import Record


class StreamFailed(Exception):
    """A failed request in Locust's failures table: loadgen's error (never the body)."""


def fire(environment: Environment, record: Record, name: str) -> None:
    """Locust's request events for one measured request: TTFT (its response time, or its
    failure), then TPOT and E2E where defined; response times in ms, as Locust counts."""
    request = environment.events.request
    context = {"request_id": record.request_id, "trace_id": record.trace_id}
    if not record.ok:
        elapsed_ms = (record.end_at - record.intended_at) * 1e3
        failure = StreamFailed(record.error)
        request.fire(
            request_type="TTFT",
            name=name,
            response_time=elapsed_ms,
            response_length=0,
            exception=failure,
            context=context,
        )
        return
    for kind, value, length in (
        ("TTFT", record.ttft_s, 0),
        ("TPOT", record.tpot_s, 0),
        ("E2E", record.e2e_s, record.output_tokens or 0),
    ):
        if value is not None:
            request.fire(
                request_type=kind,
                name=name,
                response_time=value * 1e3,
                response_length=length,
                exception=None,
                context=context,
            )


class LoadgenUser(User):
    """A Locust user sending loadgen's requests. Closed loop as it is (wait_time constant(0):
    the next request goes when the last response ended; --users N is loadgen's
    --concurrency N); subclass with `wait_time = constant_throughput(r)` for paced users (N
    users at r/s each approach --rate N·r open loop while each response ends inside 1/r)."""

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

        self.wait_time = wait_time  # type: ignore[method-assign]
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
        if self._http is None:
            self._http = node.client()
        record = node.measure(self._http, self._intended)
        if record.excluded is None:
            fire(self.environment, record, node.workload.path)
