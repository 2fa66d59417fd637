"""Request validation and response shapes, checked against vLLM's wire format."""

from __future__ import annotations

import orjson
import pytest

from loadgen.sim.protocol import ApiError, ChunkWriter, full_response, parse_generation


def parse(body: object, chat: bool = True):
    return parse_generation(orjson.dumps(body), chat)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "a b c"}]}


def test_chat_request_fields() -> None:
    req = parse(
        {
            **CHAT,
            "max_tokens": 5,
            "stream": True,
            "ignore_eos": True,
            "stop": "x",
            "temperature": 0,
            "top_p": 0.9,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    assert (req.model, len(req.prompt), req.max_tokens) == ("m", 5, 5)
    assert req.stream and req.ignore_eos and req.include_usage and req.continuous_usage
    assert req.stop == ("x",) and req.temperature == 0.0 and req.top_p == 0.9
    assert parse({**CHAT, "max_completion_tokens": 7}).max_tokens == 7


def test_completion_prompts() -> None:
    assert len(parse({"prompt": "one two three"}, chat=False).prompt) == 3
    assert len(parse({"prompt": [1, 2, 3, 4]}, chat=False).prompt) == 4
    assert len(parse({"prompt": ["one two"]}, chat=False).prompt) == 2


@pytest.mark.parametrize(
    "body,param",
    [
        ({**CHAT, "max_tokens": 0}, "max_tokens"),
        ({**CHAT, "max_tokens": "5"}, "max_tokens"),
        ({**CHAT, "n": 2}, "n"),
        ({**CHAT, "stop": [1]}, "stop"),
        ({**CHAT, "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages"),
        ({**CHAT, "stream": "yes"}, "stream"),
    ],
)
def test_bad_parameters_are_400(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse(body)
    assert info.value.status == 400 and info.value.param == param
    assert info.value.body()["error"]["type"] == "BadRequestError"
    assert info.value.body()["error"]["code"] == 400


def test_malformed_json_is_400() -> None:
    for body in (b"{", b"[1]", b""):
        with pytest.raises(ApiError) as info:
            parse_generation(body, True)
        assert info.value.status == 400
    with pytest.raises(ApiError):
        parse({"prompt": {"a": 1}}, chat=False)


def test_chat_chunks() -> None:
    req = parse(
        {
            **CHAT,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    writer = ChunkWriter(req, "chatcmpl-1", "m")
    role = orjson.loads(writer.role()[6:])
    assert role["object"] == "chat.completion.chunk" and role["id"] == "chatcmpl-1"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["usage"] == {"prompt_tokens": 5, "total_tokens": 5, "completion_tokens": 0}
    last = orjson.loads(writer.content(" x", 3, "stop", None)[6:])
    assert last["choices"][0] == {
        "index": 0,
        "delta": {"content": " x"},
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
    }
    assert last["usage"]["completion_tokens"] == 3
    tail = writer.tail(3).split(b"\n\n")
    assert orjson.loads(tail[0][6:])["choices"] == [] and tail[1] == b"data: [DONE]"


def test_completion_chunks_without_usage() -> None:
    req = parse({"prompt": "a", "stream": True}, chat=False)
    writer = ChunkWriter(req, "cmpl-1", "m")
    chunk = orjson.loads(writer.content("a", 1)[6:])
    assert chunk["object"] == "text_completion" and "usage" not in chunk
    assert chunk["choices"][0] == {
        "index": 0,
        "text": "a",
        "logprobs": None,
        "finish_reason": None,
        "stop_reason": None,
    }
    assert writer.tail(1) == b"data: [DONE]\n\n"


def test_full_responses() -> None:
    chat = full_response(parse(CHAT), "chatcmpl-1", "m", "hi there", 2, "length", None)
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["content"] == "hi there"
    assert chat["usage"] == {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2}
    text = full_response(parse({"prompt": "a"}, chat=False), "cmpl-1", "m", "b", 1, "stop", "x")
    assert text["choices"][0]["text"] == "b" and text["choices"][0]["stop_reason"] == "x"
