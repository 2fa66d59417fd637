"""The SSE parser: any split of a byte stream yields the same events, and bytes are kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latency_proxy.measure.sse import BOM, Event, SSEParser

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


def parse_all(
    stream: bytes, cuts: list[int], parser: SSEParser | None = None
) -> tuple[list[Event], bytes]:
    parser = parser or SSEParser()
    events: list[Event] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        events += parser.feed(stream[last:cut])
        last = cut
        assert parser.pending <= parser._max
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


def _subsequence(short: list[Event], long: list[Event]) -> bool:
    rest = iter(long)
    return all(any(e == other for other in rest) for e in short)


@given(streams(), st.lists(st.integers(0, 400), max_size=30), st.integers(1, 48))
def test_events_past_the_limit_pass_through_and_the_rest_parse_the_same(
    stream: bytes, cuts: list[int], limit: int
) -> None:
    reference = [e for e in parse_all(stream, [])[0] if e.data is not None]
    parser = SSEParser(max_event_bytes=limit)
    events, rest = parse_all(stream, [c for c in cuts if c <= len(stream)], parser)
    assert b"".join(e.raw for e in events) + rest == stream  # every byte passes on, once
    parsed = [e for e in events if e.data is not None]
    # nothing invented; nothing that never outgrew the limit missed
    assert _subsequence(parsed, reference)
    assert _subsequence([e for e in reference if len(e.raw) <= limit], parsed)


def test_a_150_mb_event_passes_through_in_bounded_memory() -> None:
    parser = SSEParser(max_event_bytes=4 * 2**20)
    reads = [b'data: {"n":1}\n\ndata: ', *[b"a" * 65536] * (150 * 16), b'\n\ndata: {"n":2}\n\n']
    events: list[tuple[int, bytes | None]] = []  # sizes only: the pieces are not kept
    for read in reads:
        events += [(len(e.raw), e.data) for e in parser.feed(read)]
        assert parser.pending <= 4 * 2**20
    assert sum(size for size, _ in events) == sum(map(len, reads))  # every byte, once
    parsed = [data for _, data in events if data is not None]
    assert parsed == [b'{"n":1}', b'{"n":2}'] and parser.oversized == 1


@given(streams(), st.lists(st.integers(0, 400), max_size=30))
def test_a_leading_bom_is_no_part_of_the_first_field(stream: bytes, cuts: list[int]) -> None:
    """WHATWG event-stream: one leading U+FEFF is ignored; its bytes stay in the stream."""
    events, rest = parse_all(BOM + stream, [c for c in cuts if c <= len(stream) + 3])
    without, rest_without = parse_all(stream, [])
    assert events[0] == Event(BOM, None) and events[1:] == without and rest == rest_without
    assert b"".join(e.raw for e in events) + rest == BOM + stream


def test_only_one_bom_and_only_at_the_start() -> None:
    events, _ = parse_all(BOM + BOM + b"data: x\n\n", [1, 2, 4])
    assert [e.data for e in events] == [None, None]  # the second one is a field's name
    events, _ = parse_all(b"data: x\n\n" + BOM + b"data: y\n\n", [])
    assert [e.data for e in events] == [b"x", None]
    assert parse_all(BOM[:2], [1]) == ([], BOM[:2])  # a stream that ended within one
