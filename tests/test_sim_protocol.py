"""Request validation and response shapes, checked against vLLM's wire format."""

from __future__ import annotations

import orjson
import pytest

from loadgen.sim.protocol import (
    ApiError,
    ChunkWriter,
    full_response,
    parse_generation,
    system_fingerprint,
)


def parse(body: object, chat: bool = True):
    return parse_generation(orjson.dumps(body), chat)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "a b c"}]}
FP = "loadgen-sim-0123abcd"


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


@pytest.mark.parametrize(
    "body,param",
    [(b'{"model": ', "body.10"), (b"{not json", "body.1"), (b"[1]", "body"), (b"", "body")],
)
def test_a_body_that_is_no_json_object_is_vllms_validation_error(body: bytes, param: str) -> None:
    # FastAPI rejects it before vLLM's handler sees it: type is the HTTP phrase, param the
    # error's location (the offset where JSON decoding failed)
    with pytest.raises(ApiError) as info:
        parse_generation(body, True)
    error = info.value.body()["error"]
    assert (info.value.status, error["type"], error["param"], error["code"]) == (
        400,
        "Bad Request",
        param,
        400,
    )
    assert error["message"].startswith("1 validation error:")


def test_a_bad_prompt_is_400() -> None:
    with pytest.raises(ApiError) as info:
        parse({"prompt": {"a": 1}}, chat=False)
    assert info.value.param == "prompt"


def test_chat_chunks() -> None:
    req = parse(
        {
            **CHAT,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    writer = ChunkWriter(req, "chatcmpl-1", "m", FP)
    role = orjson.loads(writer.role()[6:])
    assert role["object"] == "chat.completion.chunk" and role["id"] == "chatcmpl-1"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "token_ids" not in role["choices"][0]
    assert role["prompt_token_ids"] is None and role["prompt_text"] is None  # vLLM sets both
    assert role["usage"] == {
        "prompt_tokens": 5,
        "total_tokens": 5,
        "completion_tokens": 0,
        "completion_tokens_details": None,
    }
    middle = orjson.loads(writer.content(" w", 2)[6:])
    assert middle["choices"][0] == {
        "index": 0,
        "delta": {"content": " w"},
        "logprobs": None,
        "finish_reason": None,
        "token_ids": None,
    }
    assert "prompt_token_ids" not in middle and "system_fingerprint" not in middle
    last = orjson.loads(writer.content(" x", 3, "stop", None)[6:])
    assert last["choices"][0] == {
        "index": 0,
        "delta": {"content": " x"},
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
        "token_ids": None,
    }
    assert last["usage"]["completion_tokens"] == 3
    assert "system_fingerprint" not in last  # the usage chunk is the last message
    tail = writer.tail(3).split(b"\n\n")
    assert orjson.loads(tail[0][6:]) == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": role["created"],
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5, "total_tokens": 8, "completion_tokens": 3},
        "system_fingerprint": FP,
    }
    assert tail[1] == b"data: [DONE]"


def test_completion_chunks_without_usage() -> None:
    req = parse({"prompt": "a", "stream": True}, chat=False)
    writer = ChunkWriter(req, "cmpl-1", "m", FP)
    chunk = orjson.loads(writer.content("a", 1)[6:])
    assert chunk["object"] == "text_completion" and "usage" not in chunk
    assert chunk["choices"][0] == {
        "index": 0,
        "text": "a",
        "logprobs": None,
        "finish_reason": None,
        "stop_reason": None,
        "prompt_token_ids": None,
        "token_ids": None,
    }
    assert "system_fingerprint" not in chunk
    last = orjson.loads(writer.content(" b", 2, "length")[6:])
    assert last["system_fingerprint"] == FP  # no usage chunk: the finishing chunk is last
    assert writer.tail(2) == b"data: [DONE]\n\n"


def test_completion_running_usage_has_only_the_counts() -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    req = parse({"prompt": "a", "stream": True, "stream_options": options}, chat=False)
    chunk = orjson.loads(ChunkWriter(req, "cmpl-1", "m", FP).content("b", 1, "length")[6:])
    assert chunk["usage"] == {"prompt_tokens": 1, "total_tokens": 2, "completion_tokens": 1}
    assert "system_fingerprint" not in chunk


def test_full_responses() -> None:
    chat = full_response(parse(CHAT), "chatcmpl-1", "m", FP, "hi there", 2, "length", None)
    assert chat["object"] == "chat.completion" and chat["system_fingerprint"] == FP
    assert chat["choices"][0]["message"] == {
        "role": "assistant",
        "content": "hi there",
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    assert chat["usage"] == {
        "prompt_tokens": 5,
        "total_tokens": 7,
        "completion_tokens": 2,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    nulls = {"service_tier", "prompt_token_ids", "prompt_text", "kv_transfer_params", "metrics"}
    assert all(chat[key] is None for key in nulls)
    text = full_response(parse({"prompt": "a"}, chat=False), "cmpl-1", "m", FP, "b", 1, "stop", "x")
    assert text["choices"][0]["text"] == "b" and text["choices"][0]["stop_reason"] == "x"
    assert text["choices"][0]["prompt_token_ids"] is None
    assert "prompt_logprobs" not in text and "prompt_text" not in text  # they are per choice


def test_system_fingerprint_names_the_configuration() -> None:
    fingerprint = system_fingerprint("sim: fixed timing")
    assert fingerprint == system_fingerprint("sim: fixed timing")
    assert fingerprint != system_fingerprint("llama-70b: a preset")
    assert fingerprint.startswith("loadgen-sim-") and len(fingerprint) == len("loadgen-sim-") + 8
