"""What Locust's table gets of loadgen's records: per measured request TTFT (its response
time, and its failures), TPOT and E2E, in ms, as request events."""

from __future__ import annotations

from locust.env import Environment

from loadgen.analysis.records import Record


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
