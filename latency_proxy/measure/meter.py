"""StreamMeter: timestamps + parsed SSE events -> RequestTiming. Pure, no I/O.

This is the one definition of every figure (docs/reference/timing.md); the proxy and
loadgen both feed it, each with its own t0. Times are seconds from any monotonic clock.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from latency_proxy.measure import event_shape, server_report
from latency_proxy.measure.coalescing import coalesced_fraction
from latency_proxy.measure.conversation import AnswerDigest
from latency_proxy.measure.payload import EventKind, Reading, read, texts
from latency_proxy.measure.sse import Event

DONE_DATA = b"[DONE]"  # the data of the stream's last event
# A gap longer than this is a stall. Healthy decode steps take 10-100 ms and a long prefill
# batched beside a stream (chunked prefill) adds a few hundred; a preemption, a recompute or a
# stuck engine costs seconds. One second is ten times the slowest healthy token, and where a
# reader sees a stream as frozen rather than slow.
STALL_THRESHOLD_S = 1.0
_LESSONS = 4  # shapes a stream may try to learn (a reasoning model changes shape once)
_PROBE_USAGE = b'{"probe":0}'
# the largest token count taken from a usage object: exact as a float, so every sink (a
# histogram, a JSON reader) sees the number itself; beyond it the value is not a count
MAX_TOKEN_COUNT = 2**53


class ReasoningSource(Enum):
    """Where a reasoning token count came from."""

    SERVER = "server"  # usage.completion_tokens_details.reasoning_tokens
    COUNTED = "counted"  # the stream's reasoning events (their per-chunk usage, if any)


class TokenSource(Enum):
    """Where the output token count came from, in order of trust."""

    USAGE_PER_CHUNK = "usage_per_chunk"  # cumulative usage on every chunk
    USAGE_TOTAL = "usage_total"  # one final usage; per-chunk counts spread evenly
    EVENTS = "events"  # no usage at all: one token per content event


@dataclass(slots=True)
class RequestTiming:
    """Everything measured about one request. Durations in seconds; None = not defined."""

    time_to_first_chunk_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    coalesced_fraction: float | None = None  # share of gaps that are bursts (coalescing.py)
    tokens_per_chunk: list[int] = field(default_factory=list)
    ttfnt_s: dict[int, float] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: TokenSource = TokenSource.EVENTS
    events: int = 0
    content_events: int = 0
    invalid_events: int = 0  # data not JSON, or a usage whose counts are not counts
    finish_reasons: list[str] = field(default_factory=list)
    response_id: str | None = None
    response_model: str | None = None
    error_type: str | None = None  # type/code of an error object sent inside the stream
    output_text: str | None = None  # only when the meter was asked to collect it
    # what a 2026 server says about the request (None: not on the wire, never a zero)
    answer_ttft_s: float | None = None  # first answer token (content, text, tool call)
    reasoning_s: float | None = None  # first reasoning token to the answer's first
    reasoning_tokens: int | None = None
    reasoning_source: ReasoningSource | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    server_queue_s: float | None = None  # the server's own clock (per-request metrics)
    server_ttft_s: float | None = None  # from being scheduled to the first token
    server_decode_s: float | None = None  # first token to last
    server_itl_s: float | None = None
    spec_acceptance_rate: float | None = None  # speculative decoding's draft acceptance
    spec_acceptance_length: float | None = None
    max_itl_s: float | None = None
    stalls: int | None = None  # gaps longer than the stall threshold

    @property
    def reasoning_source_value(self) -> str | None:
        """reasoning_source as text: what the log line, the CLIENT span and loadgen record."""
        return self.reasoning_source.value if self.reasoning_source is not None else None


class StreamMeter:
    """Accumulates one response. Call on_event per SSE event (or on_body once), then finish.

    Content events that fit the stream's learned Shape (latency_proxy.measure.event_shape) skip the
    full JSON parse: only their text and usage are parsed, and the rest of their Reading is
    the template's. Learning verifies the shape with a probe, so both paths give the same
    kind and figures for every event (tests/proxy/measure/test_meter_lazy.py).
    """

    __slots__ = (
        "_answer",
        "_content_tokens",
        "_first_n",
        "_lessons",
        "_per_chunk_usage",
        "_reasoning_events",
        "_reasoning_usage",
        "_shape",
        "_shape_reading",
        "_shape_usage",
        "_stall_threshold",
        "_t_answer",
        "_t_content",
        "_t_first_event",
        "_t_reasoning",
        "_t_reasoning_last",
        "_text",
        "_usage_output",
        "result",
        "t0",
    )

    def __init__(
        self,
        t0: float,
        first_n: tuple[int, ...] = (3,),
        collect_text: bool = False,
        lazy: bool = True,
        stall_threshold_s: float = STALL_THRESHOLD_S,
        answer: AnswerDigest | None = None,
    ) -> None:
        """lazy=False parses every event in full: the reference the lazy path must equal.
        `answer` hashes the answer's text as it streams (a chat call's sessions)."""
        self.t0 = t0
        self._answer = answer
        self._stall_threshold = stall_threshold_s
        self._t_answer: float | None = None  # the first answer event
        self._t_reasoning: float | None = None  # the first reasoning event
        self._t_reasoning_last = 0.0
        self._reasoning_events = 0
        self._reasoning_usage: int | None = None  # cumulative tokens at the last one, if told
        self._first_n = first_n
        self._text: list[str] | None = [] if collect_text else None  # for content capture
        self._t_first_event: float | None = None
        self._t_content = array("d")  # time of each content event
        self._content_tokens = array("q")  # cumulative output tokens after each, -1 unknown
        self._per_chunk_usage = True  # every content event carried usage so far
        self._usage_output: int | None = None
        self._shape: event_shape.Shape | None = None
        self._shape_reading = Reading(EventKind.CONTENT)
        self._shape_usage: Any = None  # the template's usage when the shape has no hole
        self._lessons = _LESSONS if lazy else 0
        self.result = RequestTiming()

    def on_event(self, t: float, event: Event) -> EventKind:
        """Account one event received at time t; returns its kind (the proxy strips by it)."""
        data = event.data
        if data is None:
            return EventKind.OTHER
        result = self.result
        result.events += 1
        if self._t_first_event is None:
            self._t_first_event = t
        if data == DONE_DATA:
            return EventKind.DONE
        shape = self._shape
        if shape is not None and (cut := shape.cut(data)) is not None:
            text, usage = cut
            if self._text is not None:
                self._text.append(text)
            if self._answer is not None and not self._shape_reading.reasoning:
                self._answer.text(text)
            if shape.middle is None:
                usage = self._shape_usage
            return self._count(t, self._shape_reading, usage)
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            result.invalid_events += 1
            return EventKind.INVALID
        reading = read(payload)
        if reading.kind is EventKind.CONTENT:
            if self._text is not None:
                self._text.extend(texts(payload, "delta"))
            if self._answer is not None:
                self._answer.delta(payload)
            if self._lessons:
                self._learn(data, payload, reading)
        elif reading.kind is EventKind.USAGE_ONLY:
            self._take_server_report(payload)
        return self._count(t, reading, payload.get("usage") if isinstance(payload, dict) else None)

    def on_body(self, body: bytes) -> None:
        """Account a non-streaming JSON response: usage, ids, finish reasons."""
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(payload, dict):
            self._take_reading(read(payload))
            self._take_usage(payload.get("usage"))
            self._take_server_report(payload)
            if self._text is not None:
                self._text.extend(texts(payload, "message"))
            if self._answer is not None:
                self._answer.message(payload)

    def finish(self, t_end: float) -> RequestTiming:
        """Compute the figures; t_end is when the last byte of the response went out."""
        r = self.result
        t0 = self.t0
        r.e2e_s = t_end - t0
        if self._t_first_event is not None:
            r.time_to_first_chunk_s = self._t_first_event - t0
        times = self._t_content
        n = len(times)
        r.content_events = n
        if self._text is not None:
            r.output_text = "".join(self._text)
        if self._usage_output is not None:
            r.output_tokens = self._usage_output
            if n and self._per_chunk_usage:
                r.token_source = TokenSource.USAGE_PER_CHUNK
            else:
                r.token_source = TokenSource.USAGE_TOTAL
        elif n:
            r.output_tokens = n
            r.token_source = TokenSource.EVENTS
        self._finish_reasoning(r)
        if not n:
            return r
        r.ttft_s = times[0] - t0
        r.itl_s = [times[i] - times[i - 1] for i in range(1, n)]
        r.max_itl_s = top = max(r.itl_s) if r.itl_s else None
        threshold = self._stall_threshold
        stalled = top is not None and top > threshold  # the usual stream: no loop
        r.stalls = sum(1 for gap in r.itl_s if gap > threshold) if stalled else 0
        if n >= 2 and r.output_tokens is not None and r.output_tokens >= 2:
            # with every token in one event (a buffering server) the span is 0: no figure
            r.tpot_s = (times[-1] - times[0]) / (r.output_tokens - 1)
        r.coalesced_fraction = coalesced_fraction(r.itl_s, r.tpot_s)
        cumulative = self._cumulative_tokens(r)
        if r.token_source is TokenSource.USAGE_PER_CHUNK:
            previous = 0
            for total in cumulative:
                r.tokens_per_chunk.append(int(total - previous))
                previous = total
        for target in self._first_n:
            for t, total in zip(times, cumulative, strict=True):
                if total >= target:
                    r.ttfnt_s[target] = t - t0
                    break
        return r

    def _finish_reasoning(self, r: RequestTiming) -> None:
        """Answer TTFT, the reasoning phase, and its token count when the server gave none."""
        if self._t_answer is not None:
            r.answer_ttft_s = self._t_answer - self.t0
        if not self._reasoning_events:
            return
        assert self._t_reasoning is not None
        end = self._t_answer if self._t_answer is not None else self._t_reasoning_last
        r.reasoning_s = max(0.0, end - self._t_reasoning)
        if r.reasoning_tokens is None:
            counted = self._reasoning_usage if self._per_chunk_usage else None
            r.reasoning_tokens = self._reasoning_events if counted is None else counted
            r.reasoning_source = ReasoningSource.COUNTED

    def _cumulative_tokens(self, r: RequestTiming) -> list[float]:
        n = len(self._t_content)
        if r.token_source is TokenSource.USAGE_PER_CHUNK:
            return list(self._content_tokens)
        if r.token_source is TokenSource.USAGE_TOTAL and r.output_tokens:
            per_event = r.output_tokens / n
            return [per_event * (i + 1) for i in range(n)]
        return [float(i + 1) for i in range(n)]

    def _count(self, t: float, reading: Reading, usage: Any) -> EventKind:
        r = self.result
        if (
            reading.finish_reasons
            or reading.error_type is not None
            or r.response_id is None
            or r.response_model is None
        ):
            self._take_reading(reading)  # most events have nothing new to say: skip the call
        usage_tokens = None if usage is None else self._take_usage(usage)
        if reading.kind is EventKind.CONTENT:
            self._t_content.append(t)
            if usage_tokens is None:
                self._per_chunk_usage = False
                self._content_tokens.append(-1)
            else:
                self._content_tokens.append(usage_tokens)
            if reading.reasoning:
                self._reasoned(t, usage_tokens)
            elif self._t_answer is None:
                self._t_answer = t
        return reading.kind

    def _reasoned(self, t: float, usage_tokens: int | None) -> None:
        """A reasoning event; those after the answer began are not the thinking phase."""
        if self._t_answer is not None:
            return
        if self._t_reasoning is None:
            self._t_reasoning = t
        self._t_reasoning_last = t
        self._reasoning_events += 1
        self._reasoning_usage = usage_tokens

    def _take_server_report(self, payload: dict[str, Any]) -> None:
        """What the server reports about the request beside the counts (the final usage
        chunk, a whole response): server_report.read; a value not valid is not taken."""
        report = server_report.read(payload)
        if report is server_report.NOTHING:
            return
        r = self.result
        for name, value in report.values.items():
            setattr(r, name, value)
        if report.reasoning_tokens is not None:
            r.reasoning_tokens = report.reasoning_tokens
            r.reasoning_source = ReasoningSource.SERVER
        if report.invalid:
            r.invalid_events += 1

    def _take_usage(self, usage: Any) -> int | None:
        """The completion tokens of a usage object; a count that is not one (negative,
        fractional, a bool, past MAX_TOKEN_COUNT) is not taken and the event is invalid."""
        if not isinstance(usage, dict):
            return None
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        valid = True
        if type(prompt) is int and 0 <= prompt <= MAX_TOKEN_COUNT:
            self.result.input_tokens = prompt
        elif prompt is not None:
            valid = False
        taken = None
        if type(completion) is int and 0 <= completion <= MAX_TOKEN_COUNT:
            self._usage_output = taken = completion
        elif completion is not None:
            valid = False
        if not valid:
            self.result.invalid_events += 1
        return taken

    def _take_reading(self, reading: Reading) -> None:
        r = self.result
        if r.response_id is None:
            r.response_id = reading.response_id
        if r.response_model is None:
            r.response_model = reading.response_model
        if reading.error_type is not None:
            r.error_type = reading.error_type
        if reading.finish_reasons:
            r.finish_reasons.extend(reading.finish_reasons)

    def _learn(self, data: bytes, payload: dict[str, Any], reading: Reading) -> None:
        """Take this content event's bytes as the stream's shape if a probe confirms it:
        other values in its holes must change the payload's one text and its top-level
        usage, and nothing else the meter reads (the Reading check is implied today by the
        text keys event_shape cuts at; it keeps exactness if those ever change)."""
        self._lessons -= 1
        found = texts(payload, "delta")
        if len(found) != 1:
            return
        usage = payload.get("usage")
        shape = event_shape.find(data, usage_hole=isinstance(usage, dict))
        if shape is None:
            return
        marker = "y" if found[0] == "x" else "x"
        try:
            probe = orjson.loads(shape.fill(marker.encode(), _PROBE_USAGE))
        except orjson.JSONDecodeError:
            return
        if (
            read(probe) == reading
            and texts(probe, "delta") == [marker]
            and probe.get("usage") == (usage if shape.middle is None else {"probe": 0})
        ):
            self._shape, self._shape_reading, self._shape_usage = shape, reading, usage
