"""A model call's metric observations: counted in flight while it runs, then one request
count and its figures (telemetry/instruments.py defines the instruments,
docs/reference/timing.md the figures)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from latency_proxy.measure.coalescing import buffered
from latency_proxy.measure.meter import RequestTiming
from latency_proxy.record.exchange import Exchange
from latency_proxy.telemetry import instruments as ins
from latency_proxy.telemetry.providers import Telemetry


class MetricsWriter:
    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry
        self._model_label = telemetry.model_label
        # the rows this process observes, for a streamed answer and for any other: chosen
        # once (the GenAI name set is fixed at start), not row by row per request
        names = LATEST if telemetry.latest_gen_ai else OLD
        kept = tuple(row for row in OBSERVED if row.names in (BOTH, names))
        self._rows = {True: kept, False: tuple(row for row in kept if not row.stream)}

    def labels(self, exchange: Exchange) -> tuple[str, str, str]:
        """operation, model, route: the labels every per-request instrument carries."""
        route = exchange.route
        return (
            exchange.operation or "",
            self._model_label.recorded(exchange.model) or "",
            route.name if route else "",
        )

    def admitted(self, exchange: Exchange) -> None:
        """The request will be sent upstream: count it in flight."""
        exchange.active_labels = self.labels(exchange)
        self._telemetry.instrument(ins.ACTIVE).record(1, exchange.active_labels)

    def ended(self, exchange: Exchange) -> None:
        """The request's last byte is out: no longer in flight, now rather than when its
        record is written (records are written one per loop turn, and a burst of short
        answers would otherwise read as more requests in flight than there are)."""
        if exchange.active_labels is not None:
            self._telemetry.instrument(ins.ACTIVE).record(-1, exchange.active_labels)
            exchange.active_labels = None

    def not_retried(self, route: str, method: str) -> None:
        """A request the upstream may have run, left to fail rather than sent twice; any
        request, not only model calls (a POST that loads an adapter counts too)."""
        self._telemetry.instrument(ins.NOT_RETRIED).record(1, (route, method))

    def record(
        self, exchange: Exchange, timing: RequestTiming | None, trace_id: str | None
    ) -> None:
        tel = self._telemetry
        labels = self.labels(exchange)
        outcome = exchange.outcome.value
        tel.instrument(ins.REQUESTS).record(1, (*labels, str(exchange.status), outcome))
        kind = exchange.upstream_error_kind
        if kind is not None:
            tel.instrument(ins.UPSTREAM_ERRORS).record(1, (*labels, kind.value))
        if exchange.oversized_events:
            tel.instrument(ins.OVERSIZED_EVENTS).record(exchange.oversized_events, labels)
        if timing is None:
            return
        context = (exchange.client_span or exchange.server_span).as_parent()
        stream = bool(exchange.call and exchange.call.stream)
        for row in self._rows[stream]:
            exemplar = trace_id if row.exemplar else None
            for extra, values in row.series(exchange, timing):
                tel.instrument(row.spec).record_all(values, (*labels, *extra), exemplar, context)
        if stream and buffered(timing.coalesced_fraction):
            tel.instrument(ins.COALESCED_STREAMS).record(1, labels)


BOTH, OLD, LATEST = "both", "old", "latest"  # OTEL_SEMCONV_STABILITY_OPT_IN picks OLD or LATEST

Series = Iterable[tuple[tuple[str, ...], Sequence[float]]]  # (extra labels, values) per series


@dataclass(frozen=True, slots=True)
class Observed:
    """One row of a request's observations: an instrument and where its values come from.

    `value` gives one number (or None: nothing observed), `values` all of a request's at
    once (observed in one step), `keyed` a mapping whose keys are the last label's values.
    """

    spec: ins.Spec
    value: Callable[[Exchange, RequestTiming], float | None] | None = None
    extra: tuple[str, ...] = ()
    values: Callable[[RequestTiming], Sequence[float]] | None = None
    keyed: Callable[[RequestTiming], Mapping[int, float]] | None = None
    stream: bool = False  # streamed answers only
    exemplar: bool = True  # the request's trace id rides on the largest value
    names: str = "both"  # a GenAI name set's own row: OLD or LATEST (semconv.py)

    def series(self, exchange: Exchange, timing: RequestTiming) -> Series:
        if self.value is not None:
            value = self.value(exchange, timing)
            return () if value is None else ((self.extra, (value,)),)
        if self.values is not None:
            return ((self.extra, self.values(timing)),)
        assert self.keyed is not None
        return (((str(key),), (value,)) for key, value in self.keyed(timing).items())


# in the order they are recorded; a new per-request histogram is one row
OBSERVED: tuple[Observed, ...] = (
    Observed(ins.DURATION, lambda x, t: t.e2e_s),
    Observed(ins.INFERENCE_INPUT_TOKENS, lambda x, t: t.input_tokens, names=LATEST),
    Observed(ins.INFERENCE_OUTPUT_TOKENS, lambda x, t: t.output_tokens, names=LATEST),
    Observed(ins.USAGE_INPUT_TOKENS, lambda x, t: t.input_tokens, names=LATEST),
    Observed(ins.USAGE_OUTPUT_TOKENS, lambda x, t: t.output_tokens, names=LATEST),
    Observed(ins.USAGE_CACHE_READ_TOKENS, lambda x, t: t.cached_tokens, names=LATEST),
    Observed(ins.USAGE_REASONING_TOKENS, lambda x, t: t.reasoning_tokens, names=LATEST),
    Observed(ins.TOKEN_USAGE, lambda x, t: t.input_tokens, ("input",), names=OLD),
    Observed(ins.TOKEN_USAGE, lambda x, t: t.output_tokens, ("output",), names=OLD),
    Observed(ins.REASONING_TOKENS, lambda x, t: t.reasoning_tokens),
    Observed(ins.CACHED_FRACTION, lambda x, t: cached_fraction(t)),
    Observed(ins.OVERHEAD, lambda x, t: x.request_overhead_s, ("request",)),
    Observed(ins.OVERHEAD, lambda x, t: x.event_overhead_s, ("event",)),
    Observed(ins.TIME_TO_FIRST_CHUNK, lambda x, t: t.time_to_first_chunk_s, stream=True, names=OLD),
    Observed(
        ins.INFERENCE_TIME_TO_FIRST_CHUNK,
        lambda x, t: t.time_to_first_chunk_s,
        stream=True,
        names=LATEST,
    ),
    Observed(ins.TTFT, lambda x, t: t.ttft_s, stream=True),
    Observed(ins.ANSWER_TTFT, lambda x, t: t.answer_ttft_s, stream=True),
    Observed(ins.TPOT, lambda x, t: t.tpot_s, stream=True),
    Observed(ins.TIME_TO_FIRST_N_TOKENS, keyed=lambda t: t.ttfnt_s, stream=True),
    Observed(ins.TIME_PER_OUTPUT_CHUNK, values=lambda t: t.itl_s, stream=True, names=OLD),
    Observed(
        ins.INFERENCE_TIME_PER_OUTPUT_CHUNK, values=lambda t: t.itl_s, stream=True, names=LATEST
    ),
    Observed(ins.STALLS, lambda x, t: t.stalls or None, stream=True, exemplar=False),
    Observed(
        ins.TOKENS_PER_CHUNK, values=lambda t: t.tokens_per_chunk, stream=True, exemplar=False
    ),
)


def cached_fraction(timing: RequestTiming) -> float | None:
    """The share of the prompt served from the prefix cache, when the server said."""
    if timing.cached_tokens is None or not timing.input_tokens:
        return None
    return min(1.0, timing.cached_tokens / timing.input_tokens)
