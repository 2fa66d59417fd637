"""The lazy meter equals the full parse: same kind for every event, same figures per stream.

Streams are made the way a model server makes them — one template per stream, only the
text and the usage changing — and then roughened: any key order, duplicate keys, odd
whitespace, escaped quotes and unicode escapes in text, nested objects, "content": "" and
null, usage on content chunks or not a dict, error objects, events from another template,
malformed JSON, comments and [DONE], CRLF and CR line ends, reads split at any byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from latency_proxy.measure import event_shape
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.payload import EventKind
from latency_proxy.measure.sse import Event, SSEParser

Pairs = list[tuple[str, Any]]  # a JSON object as written: keys in order, duplicates allowed


class Obj:
    def __init__(self, pairs: Pairs) -> None:
        self.pairs = pairs


TEXT = st.text(st.sampled_from(list('ab "\\\n\t/é😀\x00\u2028{}:,[]x')), max_size=6)
TEXTS = st.one_of(TEXT.filter(bool), TEXT)  # mostly not empty, as a model writes
WHITESPACE = st.sampled_from(["", "", "", "", " ", "\n", "\t "])


@st.composite
def styles(draw: st.DrawFn) -> dict[str, Any]:
    """How one writer spells JSON: whitespace, escapes."""
    return {
        "colon": draw(WHITESPACE),
        "comma": draw(WHITESPACE),
        "ascii": draw(st.booleans()),
        "slash": draw(st.booleans()),  # "\/" for "/"
    }


def dump(value: Any, style: dict[str, Any]) -> str:
    if isinstance(value, Obj):
        sep = "," + style["comma"]
        colon = style["colon"] + ":" + style["colon"]
        return "{" + sep.join(dump(k, style) + colon + dump(v, style) for k, v in value.pairs) + "}"
    if isinstance(value, list):
        return "[" + ("," + style["comma"]).join(dump(v, style) for v in value) + "]"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=style["ascii"])
        return text.replace("/", "\\/") if style["slash"] else text
    return json.dumps(value)


@st.composite
def templates(draw: st.DrawFn) -> Callable[[str, int], Obj]:
    """A writer of one stream's content chunks: (text, completion tokens) -> payload."""
    chat = draw(st.booleans())
    text_key = draw(st.sampled_from(["content", "reasoning_content", "reasoning"]))
    extra_delta = draw(st.sampled_from([[], [], ["role"], ["tool_calls"], ["content", "role"]]))
    finish = draw(st.sampled_from([None, None, "stop", "length", 3]))
    usage_kind = draw(st.sampled_from(["none", "absent", "dict", "dict", "nested", "odd", "fixed"]))
    nested = draw(st.sampled_from([None, None, "content", "usage"]))  # look-alikes deeper in
    error = draw(st.sampled_from([None, None, {"type": "Bad", "message": "no"}, {"code": 4}]))
    choices_n = draw(st.sampled_from([1, 1, 1, 2]))
    order = draw(st.randoms(use_true_random=False))
    shuffle = draw(st.booleans())  # else in vLLM's order
    duplicate = draw(st.sampled_from([None, None, None, "id", "usage", "choices", "model"]))
    duplicate_last = draw(st.booleans())  # the last of duplicate keys counts

    def usage(n: int) -> Any:
        if usage_kind == "none":
            return None
        if usage_kind == "odd":
            return ["not", "a", "dict"]
        if usage_kind == "fixed":
            return Obj([("prompt_tokens", 7)])
        pairs = [("prompt_tokens", 7), ("completion_tokens", n), ("total_tokens", 7 + n)]
        if usage_kind == "nested":
            pairs.append(("completion_tokens_details", Obj([("reasoning_tokens", 0)])))
        return Obj(pairs)

    def write(text: str, n: int) -> Obj:
        choices = []
        for index in range(choices_n):
            choice: Pairs = [("index", index), ("logprobs", None), ("finish_reason", finish)]
            if chat:
                delta: Pairs = [(text_key, text)]
                for key in extra_delta:
                    value = {"role": "assistant", "tool_calls": [], "content": ""}[key]
                    delta.append((key, value))
                choice.append(("delta", Obj(delta)))
            else:
                choice.append(("text", text))
            if shuffle:
                order.shuffle(choice)
            choices.append(Obj(choice))
        pairs: Pairs = [
            ("id", "cmpl-1"),
            ("object", "chunk"),
            ("created", 1),
            ("model", "m/1"),
            ("choices", choices),
        ]
        if usage_kind != "absent":
            pairs.append(("usage", usage(n)))
        if nested == "content":
            pairs.append(("x", Obj([("y", [1, Obj([("content", "deep")])]), ("text", "t")])))
        elif nested == "usage":
            pairs.append(("x", Obj([("usage", Obj([("completion_tokens", 99)]))])))
        if error is not None:
            pairs.append(("error", Obj(list(error.items()))))
        if shuffle:
            order.shuffle(pairs)
        if duplicate is not None:
            pairs.insert(len(pairs) if duplicate_last else 0, (duplicate, Obj([("dup", 1)])))
        return Obj(pairs)

    return write


@st.composite
def other_payloads(draw: st.DrawFn) -> Any:
    """Events that are not the template's: role, finish, usage-only, odd JSON values."""
    return draw(
        st.sampled_from(
            [
                Obj([("choices", [Obj([("delta", Obj([("role", "assistant")]))])])]),
                Obj([("choices", [Obj([("delta", Obj([("content", None)]))])])]),
                Obj([("choices", [Obj([("delta", Obj([]))]), ("finish_reason", "stop")])]),
                Obj([("choices", []), ("usage", Obj([("completion_tokens", 9)]))]),
                Obj([("choices", 5)]),
                Obj([("choices", "ab"), ("usage", 1)]),
                Obj([("error", Obj([("message", "secret"), ("type", "E")]))]),
                [1, 2],
                "text",
                None,
            ]
        )
    )


def roughen(draw: st.DrawFn, data: bytes) -> bytes:
    """The template's bytes with one byte dropped, doubled or changed: often malformed."""
    at = draw(st.integers(0, len(data) - 1))
    byte = bytes([draw(st.sampled_from(b'"\\{}[],: 0a\xff'))])
    how = draw(st.sampled_from(["drop", "double", "change"]))
    if how == "drop":
        return data[:at] + data[at + 1 :]
    if how == "double":
        return data[:at] + data[at : at + 1] + data[at:]
    return data[:at] + byte + data[at + 1 :]


def sse(data: bytes, line_end: bytes) -> bytes:
    lines = [b"data: " + line for line in data.split(b"\n")]
    return b"".join(line + line_end for line in lines) + line_end


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """A stream's events, each as its SSE bytes."""
    write = draw(templates())
    style = draw(styles())
    line_ends = draw(st.sampled_from([[b"\n"], [b"\n"], [b"\r\n"], [b"\n", b"\r\n", b"\r"]]))
    events = []
    for n in range(1, draw(st.integers(1, 12)) + 1):
        what = draw(st.sampled_from(["template"] * 6 + ["other", "rough", "restyled", "misc"]))
        if what in ("template", "rough"):
            data = dump(write(draw(TEXTS), n), style).encode()
            if what == "rough":
                data = roughen(draw, data)
        elif what == "restyled":
            data = dump(write(draw(TEXTS), n), draw(styles())).encode()
        elif what == "other":
            data = dump(draw(other_payloads()), style).encode()
        else:
            events.append(draw(st.sampled_from([b": ping\n\n", b"data: [DONE]\n\n", b"\n"])))
            continue
        events.append(sse(data, draw(st.sampled_from(line_ends))))
    return events


def meter_both(events: list[Event], collect_text: bool, first_n: tuple[int, ...]):
    lazy = StreamMeter(0.0, first_n, collect_text)
    full = StreamMeter(0.0, first_n, collect_text, lazy=False)
    for i, event in enumerate(events):
        t = 0.01 * (i + 1)
        assert lazy.on_event(t, event) is full.on_event(t, event), event
    return lazy.finish(1.0), full.finish(1.0)


@settings(max_examples=400)
@given(streams(), st.booleans(), st.lists(st.integers(0, 400), max_size=12))
def test_lazy_and_full_parse_agree_on_every_event_and_figure(
    stream: list[bytes], collect_text: bool, cuts: list[int]
) -> None:
    whole = b"".join(stream)
    parser = SSEParser()
    events: list[Event] = []
    last = 0
    for cut in [*sorted({c for c in cuts if c <= len(whole)}), len(whole)]:
        events += parser.feed(whole[last:cut])
        last = cut
    lazy, full = meter_both(events, collect_text, (1, 3))
    assert lazy == full


@given(streams())
def test_reads_of_one_event_each_parse_as_the_whole_stream(stream: list[bytes]) -> None:
    parser = SSEParser()
    one_by_one = [e for chunk in stream for e in parser.feed(chunk)]
    assert one_by_one == SSEParser().feed(b"".join(stream))


def test_every_split_of_a_small_stream_gives_the_same_events() -> None:
    stream = (
        b'data: {"choices":[{"delta":{"content":"a\\"b"}}]}\n\n: c\n\n'
        b'data: {"choices":[{"delta":{"content":"\\u00e9"}}]}\r\n\r\n'
        b'data: {"choices":[],\rdata: "usage":{"completion_tokens":2}}\r\r'
        b"data: [DONE]\n\n"
    )
    whole = SSEParser().feed(stream)
    assert [e.data is None for e in whole] == [False, True, False, False, False]
    for a in range(len(stream) + 1):
        for b in range(a, len(stream) + 1, 7):
            parser = SSEParser()
            events = parser.feed(stream[:a]) + parser.feed(stream[a:b]) + parser.feed(stream[b:])
            assert events == whole, (a, b)
    lazy, full = meter_both(whole, True, (3,))
    assert lazy == full
    assert (lazy.output_text, lazy.output_tokens, lazy.content_events) == ('a"bé', 2, 2)


VLLM_CHAT = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":5,"total_tokens":%d,"completion_tokens":%d}}'
)


def test_a_vllm_stream_fits_one_shape_whose_cut_is_text_and_usage() -> None:
    first = VLLM_CHAT % (b"Hi", 6, 1)
    shape = event_shape.find(first, usage_hole=True)
    assert shape is not None
    assert shape.cut(VLLM_CHAT % (b' \\"x\\"', 7, 2)) == (
        ' "x"',
        {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2},
    )
    assert shape.cut(VLLM_CHAT % (b"", 7, 2)) is None  # empty text: not content, full parse
    assert shape.cut(VLLM_CHAT % (b'a"', 7, 2)) is None  # an unescaped quote
    assert shape.cut(first.replace(b'"logprobs":null', b'"logprobs":1')) is None


def test_the_lazy_path_counts_like_the_full_one_on_a_vllm_stream() -> None:
    chunks = [VLLM_CHAT % (b"tok", 5 + n, n) for n in range(1, 9)]
    events = [Event(b"data: " + c + b"\n\n", c) for c in chunks]
    lazy, full = meter_both(events, True, (3,))
    assert lazy == full
    assert (lazy.content_events, lazy.output_tokens, lazy.output_text) == (8, 8, "tok" * 8)
    assert lazy.tokens_per_chunk == [1] * 8
    kinds = {StreamMeter(0.0).on_event(0.1, e) for e in events}
    assert kinds == {EventKind.CONTENT}


def test_look_alike_keys_deeper_in_the_payload_are_not_taken_for_text_or_usage() -> None:
    usage_deeper = (
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"%s"}}],'
        b'"usage":{"prompt_tokens":7},"x":{"usage":{"completion_tokens":99}}}'
    )
    content_first = b'{"x":{"content":"deep"},"choices":[{"delta":{"content":"%s"}}]}'
    for template in (usage_deeper, content_first):
        events = [Event(b"", template % text) for text in (b"a", b"b", b"b")]
        lazy, full = meter_both(events, True, (3,))
        assert lazy == full
        assert lazy.output_text == "abb"
