"""One proxied request from arrival to last byte: what happened to it, nothing more.

The exchange is plain per-request state, written while the request runs and read once at
the end by request_writer.RequestWriter, which turns it into spans, metric observations and a log
line; process-wide configuration stays with those writers. The status, the bytes sent and
how the request ended each have one writer below; the rest is set once by the part that
learns it (routing, the upstream call, the relay).
"""

from __future__ import annotations

from dataclasses import dataclass

from latency_proxy.base.config import Route
from latency_proxy.measure.conversation import AnswerDigest
from latency_proxy.measure.meter import RequestTiming, StreamMeter
from latency_proxy.record.model_call import ModelCall
from latency_proxy.record.outcome import Outcome, UpstreamErrorKind
from latency_proxy.record.session import Placement
from latency_proxy.record.span import RequestSpan

CLIENT_CLOSED = 499  # nginx's status for a client that left before the answer ended


@dataclass(slots=True)
class Exchange:
    request_id: str
    method: str
    path: str
    t0: float  # perf_counter at arrival
    wall0_ns: int  # time_ns at arrival, to place span timestamps
    server_span: RequestSpan
    call: ModelCall | None = None  # what the body asked for (operation None off the API)
    route: Route | None = None
    status: int = 0  # 0 until a status line went out
    outcome: Outcome = Outcome.OK
    error_type: str | None = None
    upstream_error_kind: UpstreamErrorKind | None = None
    client_span: RequestSpan | None = None
    meter: StreamMeter | None = None  # set once an upstream answer is being measured
    not_measured: str | None = None  # why a model call's answer was passed on unmeasured
    t_upstream_call: float | None = None
    overhead_event_sum: float = 0.0
    overhead_events: int = 0
    oversized_events: int = 0  # SSE events past --max-event-bytes, passed through unmetered
    bytes_in: int = 0
    bytes_out: int = 0
    active_labels: tuple[str, str, str] | None = None  # counted in flight under these
    input_texts: list[tuple[str, str]] | None = None  # only when content is captured
    loop_mark: int = 0  # the loop-lag probe at arrival (telemetry/loop_lag.py)
    loop_lag_max_s: float | None = None  # the proxy's largest event-loop lag while in flight
    session_header: bytes | None = None  # the caller's x-session-id, if it sent one
    answer: AnswerDigest | None = None  # a chat answer's keyed hash, made as it streams
    placement: Placement | None = None  # its session and parent, set when it is recorded
    finished: bool = False

    @property
    def model(self) -> str | None:
        """The model the client named (its text: see telemetry.ModelLabels before recording)."""
        return self.call.model if self.call is not None else None

    @property
    def operation(self) -> str | None:
        """chat | text_completion on a model call (the ones metrics are kept for), else None."""
        return self.call.operation if self.call is not None else None

    def responded(self, status: int) -> None:
        """The status line the client was sent (the upstream's or the proxy's own)."""
        self.status = status

    def sent(self, size: int) -> None:
        """Body bytes that went out to the client."""
        self.bytes_out += size

    def fail(self, outcome: Outcome, error_type: str) -> None:
        self.outcome = outcome
        self.error_type = error_type

    def upstream_failed(self, kind: UpstreamErrorKind, error_type: str) -> None:
        self.fail(kind.outcome, error_type)
        self.upstream_error_kind = kind

    def client_gone(self, error_type: str = "client_disconnect") -> None:
        """The client disconnected (or stopped reading, `write_timeout`): 499 unless a
        status line had already gone out."""
        self.fail(Outcome.CLIENT_ABORT, error_type)
        if self.status == 0:
            self.responded(CLIENT_CLOSED)

    @property
    def request_overhead_s(self) -> float | None:
        """Request in to request handed to the upstream client."""
        return None if self.t_upstream_call is None else self.t_upstream_call - self.t0

    @property
    def event_overhead_s(self) -> float | None:
        """Mean per chunk, upstream bytes in to client send done."""
        return self.overhead_event_sum / self.overhead_events if self.overhead_events else None

    def wall_ns(self, t: float) -> int:
        """A perf_counter time as wall-clock nanoseconds (span timestamps)."""
        return self.wall0_ns + int((t - self.t0) * 1e9)


@dataclass(frozen=True, slots=True)
class Finished:
    """An exchange as the writers record it, once: with the meter's figures (None without a
    meter, or when it failed), its last byte, and the content the policy lets out."""

    exchange: Exchange
    timing: RequestTiming | None
    t_end: float  # perf_counter at the last byte
    content: dict[str, str]
