"""The SSE parser: any split of a byte stream yields the same events, and bytes are kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latency_proxy.sse import Event, SSEParser

LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
FIELD_VALUE = st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """SSE streams with mixed line endings, comments, multi-line data and unknown fields."""
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from([b"data", b"data", b"event", b"id", b":", b"retry"]))
            value = draw(FIELD_VALUE)
            sep = draw(st.sampled_from([b": ", b":"]))
            line = kind + value if kind == b":" else kind + sep + value
            out += line + draw(LINE_ENDS)
        out += draw(LINE_ENDS)
    return out


def parse_all(stream: bytes, cuts: list[int]) -> tuple[list[Event], bytes]:
    parser = SSEParser()
    events: list[Event] = []
    last = 0
    for cut in sorted(set(cuts)):
        events += parser.feed(stream[last:cut])
        last = cut
    events += parser.feed(stream[last:])
    return events, parser.remainder()


@given(streams(), st.lists(st.integers(0, 400), max_size=30))
def test_any_split_gives_the_same_events(stream: bytes, cuts: list[int]) -> None:
    whole, rest_whole = parse_all(stream, [])
    split, rest_split = parse_all(stream, [c for c in cuts if c <= len(stream)])
    assert split == whole
    assert rest_split == rest_whole


@given(streams(), st.lists(st.integers(0, 400), max_size=30))
def test_raw_bytes_of_events_reassemble_the_stream(stream: bytes, cuts: list[int]) -> None:
    events, rest = parse_all(stream, cuts)
    assert b"".join(e.raw for e in events) + rest == stream


def test_byte_by_byte() -> None:
    stream = (
        b'data: {"a":1}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\nevent: e\rdata:[DONE]\r\rdata: z\n\n'
    )
    parser = SSEParser()
    events = []
    for i in range(len(stream)):
        events += parser.feed(stream[i : i + 1])
    assert [(e.data, e.name) for e in events] == [
        (b'{"a":1}', None),
        (None, None),
        (b"x\ny", None),
        (b"[DONE]", "e"),
        (b"z", None),
    ]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == []
    assert parser.feed(b"\n") == [Event(b"data: a\r\n\r\n", b"a")]


def test_unfinished_event_is_pending_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"partial"') == []
    assert parser.pending == len(b'data: {"partial"')
    assert parser.remainder() == b'data: {"partial"'


def test_field_without_space_and_without_colon() -> None:
    events = SSEParser().feed(b"data:x\ndata\n\n")
    assert events[0].data == b"x\n"
