"""GenAI spans in OTLP JSON (the OpenTelemetry collector's file exporter, or any SDK's spans
written as ExportTraceServiceRequest JSON, one a line): the model calls of agents' traces,
and which call each one waited for. Pure, no I/O.

A span is a model call when it has `gen_ai.operation.name` (chat, text_completion). Its
session is `gen_ai.conversation.id`, else its trace. Its parent is the call its link names
(the proxy links a call to the one it continues), else the latest call of its session that
had ended when it started: an agent calls the model, runs its tools, calls again; calls
that start together (a fan-out) wait for the same one.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OPERATIONS = ("chat", "text_completion")


class BadSpan(ValueError):
    """A span that cannot be read; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Call:
    line: int  # the file's line the span is on
    span_id: str
    session: str
    start_s: float
    end_s: float
    input_tokens: int | None
    output_tokens: int | None
    model: str | None
    links: tuple[str, ...]


def _id(value: Any, size: int) -> str:
    """A trace or span id as hex: OTLP JSON writes hex; protobuf's JSON mapping, base64."""
    if not isinstance(value, str):
        raise BadSpan(f"an id is not a string: {str(value)[:40]!r}")
    if len(value) == 2 * size:
        try:
            bytes.fromhex(value)
            return value.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error:
        raise BadSpan(f"an id is neither hex nor base64: {value[:40]!r}") from None
    if len(raw) != size:
        raise BadSpan(f"an id of {len(raw)} bytes, not {size}")
    return raw.hex()


def _value(value: Any) -> Any:
    """An AnyValue's content (intValue is a string in OTLP JSON)."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    return None


def _attributes(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    return {a["key"]: _value(a.get("value")) for a in items if isinstance(a, dict) and "key" in a}


def _nanos(value: Any, what: str) -> float:
    try:
        return int(value) / 1e9
    except (TypeError, ValueError):
        raise BadSpan(f"{what} is not a time in nanoseconds: {str(value)[:40]!r}") from None


def _tokens(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def calls(line: int, request: dict[str, Any]) -> list[Call]:
    """The model calls of one ExportTraceServiceRequest; BadSpan for a span that is not one."""
    out = []
    for resource in request.get("resourceSpans") or []:
        for scope in (resource or {}).get("scopeSpans") or []:
            for span in (scope or {}).get("spans") or []:
                if not isinstance(span, dict):
                    raise BadSpan("a span is not an object")
                attributes = _attributes(span.get("attributes"))
                if attributes.get("gen_ai.operation.name") not in OPERATIONS:
                    continue
                trace = _id(span.get("traceId"), 16)
                session = attributes.get("gen_ai.conversation.id")
                links = tuple(
                    _id(link.get("spanId"), 8)
                    for link in span.get("links") or []
                    if isinstance(link, dict)
                )
                model = attributes.get("gen_ai.request.model")
                out.append(
                    Call(
                        line,
                        _id(span.get("spanId"), 8),
                        session if isinstance(session, str) and session else trace,
                        _nanos(span.get("startTimeUnixNano"), "startTimeUnixNano"),
                        _nanos(span.get("endTimeUnixNano"), "endTimeUnixNano"),
                        _tokens(attributes.get("gen_ai.usage.input_tokens")),
                        _tokens(attributes.get("gen_ai.usage.output_tokens")),
                        model if isinstance(model, str) else None,
                        links,
                    )
                )
    return out


def parents(found: Iterable[Call]) -> dict[str, tuple[str, float]]:
    """Each call's parent span id and the gap from its end: the call a link names, else the
    latest call of its session that had ended when it started."""
    ordered = sorted(found, key=lambda c: (c.start_s, c.line))
    by_id = {c.span_id: c for c in ordered}
    out: dict[str, tuple[str, float]] = {}
    # per session: its calls still running, by end (a heap), and the one that ended latest
    running: dict[str, list[tuple[float, int, Call]]] = {}
    latest: dict[str, Call] = {}
    for n, call in enumerate(ordered):  # starts only grow: a call once ended stays ended
        pending = running.setdefault(call.session, [])
        while pending and pending[0][0] <= call.start_s:
            end_s, _, done = heapq.heappop(pending)
            if call.session not in latest or end_s > latest[call.session].end_s:
                latest[call.session] = done
        linked = next((by_id[s] for s in call.links if s in by_id and s != call.span_id), None)
        if linked is None:
            linked = latest.get(call.session)
        if linked is not None and linked.start_s <= call.start_s:
            out[call.span_id] = (linked.span_id, max(0.0, call.start_s - linked.end_s))
        heapq.heappush(pending, (call.end_s, n, call))
    return out
