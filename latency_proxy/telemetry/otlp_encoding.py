"""Spans to OTLP protobuf bytes (an ExportTraceServiceRequest), written directly.

The OTLP exporters build a protobuf object for every span, attribute and value and then
serialise them: ~170 µs for a request's two spans (~45 attributes), on the export thread,
against the event loop for the GIL. The wire format is simple enough to write as bytes,
and most of what a span carries repeats from span to span (the attribute keys, the
resource, the scope), so those are encoded once. The bytes are those the SDK's encoder
serialises for the same spans (tests/proxy/telemetry/test_otlp_encoding.py).

Field numbers: opentelemetry-proto, trace/v1/trace.proto and common/v1/common.proto.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext

_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_INT64 = (1 << 64) - 1
_REMOTE_KNOWN, _REMOTE = 0x100, 0x200  # SpanFlags: has-is-remote, is-remote


_SMALL = [bytes((n,)) for n in range(0x80)]  # the one-byte varints


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2) after its tag."""
    size = len(payload)
    return tag + (_SMALL[size] if size < 0x80 else _varint(size)) + payload


def _any_value(value: Any) -> bytes:
    """An AnyValue: every oneof member is written, a default one too (it is set)."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + _varint(value & _INT64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(item)) for item in value]))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join([_key_value(str(k), v) for k, v in value.items()]))
    if value is None:
        return b""
    raise TypeError(f"attribute value of type {type(value).__name__}")


_keys: dict[str, bytes] = {}  # a KeyValue's key field, by key: few keys recur
_doubles: dict[tuple[bytes, str], bytes] = {}  # a double's KeyValue up to its eight bytes
_CACHED = 4096  # keys beyond this many are encoded each time


def _key(key: str) -> bytes:
    encoded = _keys.get(key)
    if encoded is None:
        encoded = _field(b"\x0a", key.encode())
        if len(_keys) < _CACHED:
            _keys[key] = encoded
    return encoded


def _key_value(key: str, value: Any, tag: bytes = b"\x0a") -> bytes:
    """A KeyValue as the field `tag` of its parent: a double (most of a span's figures) is
    its key's cached prefix and eight bytes."""
    if type(value) is float:
        prefix = _doubles.get((tag, key))
        if prefix is None:
            encoded_key = _key(key)
            prefix = tag + _varint(len(encoded_key) + 11) + encoded_key + b"\x12\x09\x21"
            if len(_doubles) < _CACHED:
                _doubles[(tag, key)] = prefix
        return prefix + _DOUBLE(value)
    return _field(tag, _key(key) + _field(b"\x12", _any_value(value)))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    return b"".join([_key_value(key, value, tag) for key, value in attributes.items()])


def _span_id(context: SpanContext) -> bytes:
    return context.span_id.to_bytes(8, "big")


def encode_span(span: ReadableSpan) -> bytes:
    """One Span message, fields in number order, defaults left out as protobuf leaves them."""
    context = span.context
    assert context is not None
    parts = [b"\x0a\x10" + context.trace_id.to_bytes(16, "big"), b"\x12\x08" + _span_id(context)]
    if context.trace_state:
        parts.append(
            _field(b"\x1a", ",".join(f"{k}={v}" for k, v in context.trace_state.items()).encode())
        )
    parent = span.parent
    if parent is not None:
        parts.append(b"\x22\x08" + _span_id(parent))
    parts.append(_field(b"\x2a", span.name.encode()))
    parts.append(b"\x30" + _varint(span.kind.value + 1))  # the proto's kinds start at 1
    if span.start_time:
        parts.append(b"\x39" + _FIXED64(span.start_time))
    if span.end_time:
        parts.append(b"\x41" + _FIXED64(span.end_time))
    parts.append(_attributes(b"\x4a", span.attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        encoded = b"\x09" + _FIXED64(event.timestamp) + _field(b"\x12", event.name.encode())
        encoded += _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            encoded += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(b"\x5a", encoded))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:  # an agent's call links to the call it continues
        linked = link.context
        encoded = b"\x0a\x10" + linked.trace_id.to_bytes(16, "big") + b"\x12\x08"
        encoded += _span_id(linked) + _attributes(b"\x22", link.attributes)
        if link.dropped_attributes:
            encoded += b"\x28" + _varint(link.dropped_attributes)
        remote = _REMOTE_KNOWN | (_REMOTE if linked.is_remote else 0)
        parts.append(_field(b"\x6a", encoded + b"\x35" + _FIXED32(remote)))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    encoded_status = _field(b"\x12", status.description.encode()) if status.description else b""
    if status.status_code.value:
        encoded_status += b"\x18" + _varint(status.status_code.value)
    parts.append(_field(b"\x7a", encoded_status))
    flags = _REMOTE_KNOWN | (_REMOTE if parent is not None and parent.is_remote else 0)
    parts.append(b"\x85\x01" + _FIXED32(flags))  # field 16, fixed32
    return b"".join(parts)


_encoded: dict[int, tuple[object, bytes]] = {}  # resources and scopes by identity: few


def _once(thing: object, encode: Any) -> bytes:
    """`encode(thing)`, kept by identity (a Resource's hash dumps its attributes to JSON)."""
    cached = _encoded.get(id(thing))
    if cached is None or cached[0] is not thing:
        if len(_encoded) >= 64:  # a process has one resource and scope; tests make more
            _encoded.clear()
        cached = _encoded[id(thing)] = (thing, encode(thing))
    return cached[1]


def _resource(resource: Resource) -> bytes:
    return _field(b"\x0a", _attributes(b"\x0a", resource.attributes))


def _scope(scope: InstrumentationScope | None) -> bytes:
    body = b""
    if scope is not None:
        body = _field(b"\x0a", scope.name.encode()) if scope.name else b""
        body += _field(b"\x12", scope.version.encode()) if scope.version else b""
        body += _attributes(b"\x1a", scope.attributes)
    return _field(b"\x0a", body)


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """An ExportTraceServiceRequest: the spans grouped by resource, then by scope."""
    grouped: dict[int, tuple[Resource, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        scopes = grouped.setdefault(id(resource), (resource, {}))[1]
        scopes.setdefault(id(scope), (scope, []))[1].append(encode_span(span))
    out = []
    for resource, scopes in grouped.values():
        body = [_once(resource, _resource)]
        for scope, encoded in scopes.values():
            scope_spans = _once(scope, _scope) + b"".join(_field(b"\x12", span) for span in encoded)
            if scope is not None and scope.schema_url:
                scope_spans += _field(b"\x1a", scope.schema_url.encode())
            body.append(_field(b"\x12", scope_spans))
        if resource.schema_url:
            body.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(body)))
    return b"".join(out)
