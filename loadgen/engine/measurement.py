"""One request's measurement, whatever HTTP client streams it: identity, meter, Record.

loadgen's asyncio client (client.py) and the Locust engine's gevent client (locust/client.py)
send the same headers, feed the same SSEParser and StreamMeter with t0 at the *intended*
send time, and build the same Record, so both engines have one definition of every figure
and a request measured by either reads alike in requests.jsonl. Pure: the caller does the
I/O and passes in its perf_counter readings.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass, field

from latency_proxy.measure.meter import STALL_THRESHOLD_S, StreamMeter
from latency_proxy.measure.payload import EventKind
from latency_proxy.measure.sse import SSEParser
from loadgen.analysis.records import FIGURES, FIRST_N, SIGNALS, Record
from loadgen.engine.targets import Target


@dataclass(slots=True)
class Clock:
    """perf_counter for durations, mapped to epoch seconds so shards' records line up."""

    perf0: float = field(default_factory=time.perf_counter)
    wall0: float = field(default_factory=time.time)

    def epoch(self, t: float) -> float:
        return self.wall0 + (t - self.perf0)

    def perf(self, epoch: float) -> float:
        """The perf_counter time of an epoch time (a start another process chose)."""
        return self.perf0 + (epoch - self.wall0)


@dataclass(slots=True)
class Measurement:
    """A request from its intended send time (t0, perf_counter) to its Record.

    The caller sets `sent` when it starts sending, `status` when the response starts, calls
    `streaming` when it is an SSE stream, and sets `error` for a failure of its own (a timeout,
    a transport error); `record` fills in the stream's own failures.
    """

    target: Target
    intended: float
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    trace_id: str = field(default_factory=lambda: secrets.token_hex(16))
    sent: float = 0.0
    status: int | None = None
    error: str | None = None
    ended: bool | None = None  # a stream's [DONE] came (None: not a stream)
    collect_text: bool = False  # keep the answer's text (a multi-turn session resends it)
    stall_threshold_s: float = STALL_THRESHOLD_S  # a longer gap between tokens is a stall
    answer: str | None = None  # that text, once `record` ran; never part of the Record
    meter: StreamMeter = field(init=False)
    parser: SSEParser = field(init=False, default_factory=SSEParser)

    def __post_init__(self) -> None:
        self.meter = StreamMeter(
            self.intended,
            (FIRST_N,),
            stall_threshold_s=self.stall_threshold_s,
            collect_text=self.collect_text,
        )

    def headers(self) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",  # a compressed stream would arrive in bursts
            "X-Request-ID": self.request_id,
            # sampled W3C trace context: the proxy continues it and vLLM's llm_request joins it
            "traceparent": f"00-{self.trace_id}-{secrets.token_hex(8)}-01",
            **self.target.headers,
        }

    def streaming(self) -> None:
        """The response is an SSE stream: it must end with its [DONE]."""
        self.ended = False

    def feed(self, now: float, chunk: bytes) -> None:
        """Stream bytes as they arrived at `now`."""
        for event in self.parser.feed(chunk):
            self.ended = self.meter.on_event(now, event) is EventKind.DONE or self.ended

    def body(self, data: bytes) -> None:
        """A whole non-streaming answer."""
        self.meter.on_body(data)

    def record(self, end: float, clock: Clock) -> Record:
        timing = self.meter.finish(end)
        self.answer = timing.output_text
        error = self.error
        if error is None and timing.error_type is not None:
            error = f"stream_error:{timing.error_type}"
        if error is None and timing.output_tokens is None:
            error = "no_output"
        if error is None and self.ended is False:
            error = "truncated"  # the stream ended without its [DONE]: an upstream cut it
        return Record(
            request_id=self.request_id,
            target=self.target.name,
            intended_at=clock.epoch(self.intended),
            sent_at=clock.epoch(self.sent),
            end_at=clock.epoch(end),
            send_lag_s=self.sent - self.intended,
            ok=error is None,
            status=self.status,
            error=error,
            trace_id=self.trace_id,
            **{name: getattr(timing, name) for name in FIGURES + SIGNALS},
            ttfnt_s={str(n): t for n, t in timing.ttfnt_s.items()},
            token_source=timing.token_source.value,
            finish_reason=timing.finish_reasons[-1] if timing.finish_reasons else None,
            reasoning_source=timing.reasoning_source_value,
        )
