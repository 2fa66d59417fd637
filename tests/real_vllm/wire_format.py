"""vLLM's wire format as shapes: what a response looks like, with the values left out.

`capture(url, model)` sends a fixed set of requests (chat and completions, streamed and not,
with and without usage, /tokenize and /detokenize, and requests vLLM refuses: bodies that
are no JSON object, parameters of the wrong type or value, an unknown model, prompts beyond
the context) and reduces each response to its shape: status, content type, header names,
whether `X-Request-Id` was echoed, and the JSON key structure with value types (or, for a
stream, the sequence of distinct event shapes). Error objects are kept whole: their type,
code and param, and their message, which each scenario fixes (same model name, same
max_model_len, token-id prompts where a count shows), so it is compared word for word; a
pydantic validation message is split into its errors (`message_shape`) so a difference
names the error and key. Two servers speak the same format when their captures are equal.
Recorded from real vLLM into `vllm_wire.json`; the simulator is compared against it
(tests/test_sim_wire_vllm.py) and, in the real_vllm tier, the fixture, the simulator and the
proxy against live vLLM.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app
from loadgen.stack.processes import free_port
from tests.real_vllm.conftest import MAX_MODEL_LEN  # the simulator's too: error messages show it
from tests.support.scripted_upstream import ServerThread

FIXTURE = Path(__file__).with_name("vllm_wire.json")
REQUEST_ID = "wire-shape-1"
MESSAGES = [{"role": "user", "content": "the quick brown fox"}]
PROMPT = "the quick brown fox"
USAGE = {"include_usage": True}
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}
# transport headers, set by whichever HTTP server runs the app: not part of the API's format
TRANSPORT_HEADERS = {"date", "server", "content-length", "transfer-encoding", "connection"}


def shape(value: Any) -> Any:
    """The structure of a JSON value: dict keys kept, leaves replaced by their type name,
    a list by the distinct shapes of its items."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        distinct: list[Any] = []
        for item in map(shape, value):
            if item not in distinct:
                distinct.append(item)
        return distinct
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def stream_shape(body: bytes) -> list[Any]:
    """Shapes of a stream's events in order, runs of the same shape collapsed to one."""
    shapes: list[Any] = []
    for event in SSEParser().feed(body):
        if event.data is None:
            continue
        item = "[DONE]" if event.data == b"[DONE]" else shape(orjson.loads(event.data))
        if not shapes or shapes[-1] != item:
            shapes.append(item)
    return shapes


Body = bytes | Callable[[httpx.Client], bytes]


@dataclass(frozen=True)
class Scenario:
    path: str
    body: Body  # raw bytes, or made from the server's own earlier answers
    facts: Callable[[Any], dict[str, Any]] | None = None  # values recorded beside the shape

    def with_facts(self, facts: Callable[[Any], dict[str, Any]]) -> Scenario:
        return Scenario(self.path, self.body, facts)


# Where the simulator is known to answer differently: scenario -> the difference. Its test is
# marked xfail(strict=True), so closing the gap turns it into a failure asking to drop this.
KNOWN_SIM_MISMATCHES = {
    "chat_two_choices": (
        "vLLM samples n choices; the simulator generates one and answers n > 1 with 400 "
        "BadRequestError, param n"
    ),
    "completions_two_prompts": (
        "vLLM answers a list of prompts with one choice each; the simulator serves one prompt "
        "per request and answers 400 BadRequestError, param prompt"
    ),
    "error_message_content_not_text": (
        "vLLM validates each message against its union of 8 message types and reports every "
        "member's errors (22 here, param body.messages.0.ChatCompletionDeveloperMessageParam"
        ".content); the simulator answers 400 BadRequestError, param messages"
    ),
}


def scenarios(model: str) -> dict[str, Scenario]:
    """name -> request. Lengths are fixed (ignore_eos) so every run ends alike."""

    def chat(**extra: Any) -> Scenario:
        body = {"model": model, "messages": MESSAGES, "max_tokens": 4, "ignore_eos": True}
        return Scenario("/v1/chat/completions", _json({**body, "temperature": 0, **extra}))

    def completion(**extra: Any) -> Scenario:
        body = {"model": model, "prompt": PROMPT, "max_tokens": 4, "ignore_eos": True}
        return Scenario("/v1/completions", _json({**body, "temperature": 0, **extra}))

    def detokenize(body: dict[str, Any]) -> Scenario:
        return Scenario("/detokenize", orjson.dumps({"model": model, **body}))

    def own_tokens(client: httpx.Client) -> bytes:
        """/detokenize of what this same server's /tokenize said the prompt is."""
        tokens = client.post("/tokenize", json={"model": model, "prompt": PROMPT}).json()
        return orjson.dumps({"model": model, "tokens": tokens.get("tokens")})

    ids = [5] * MAX_MODEL_LEN  # token ids: both servers count them alike

    def round_trip(body: Any) -> dict[str, Any]:  # the text /tokenize was given comes back
        return {"round_trip": body.get("prompt") == PROMPT}

    def completion_tokens(body: Any) -> dict[str, Any]:
        return {"completion_tokens": body.get("usage", {}).get("completion_tokens")}

    def choices(body: Any) -> dict[str, Any]:  # a shape shows one choice however many
        return {"choices": len(body.get("choices", []))}

    long_text = "the " * (MAX_MODEL_LEN + 808)  # over the limit in either tokenizer
    return {
        "chat": chat(),
        "chat_stream": chat(stream=True),
        "chat_stream_usage": chat(stream=True, stream_options=USAGE),
        "chat_stream_continuous": chat(stream=True, stream_options=CONTINUOUS),
        # pydantic's lax mode: strings that read as the field's type are accepted
        "chat_stream_lax_types": chat(stream="yes", max_tokens="4", ignore_eos="true"),
        "completions": completion(),
        "completions_stream": completion(stream=True),
        "completions_stream_usage": completion(stream=True, stream_options=USAGE),
        "completions_stream_continuous": completion(stream=True, stream_options=CONTINUOUS),
        # prompt + max_tokens beyond max_model_len: max_tokens is cut to the 2 tokens left
        "completions_cut_to_the_context": Scenario(
            "/v1/completions",
            _json({"model": model, "prompt": ids[2:], "max_tokens": 4, "ignore_eos": True}),
            completion_tokens,
        ),
        "chat_two_choices": chat(n=2, temperature=1).with_facts(choices),
        "completions_two_prompts": completion(prompt=[PROMPT, PROMPT]).with_facts(choices),
        "tokenize": Scenario("/tokenize", _json({"model": model, "prompt": PROMPT})),
        "tokenize_token_strs": Scenario(
            "/tokenize", _json({"model": model, "prompt": PROMPT, "return_token_strs": True})
        ),
        "tokenize_chat": Scenario("/tokenize", _json({"model": model, "messages": MESSAGES})),
        "detokenize_round_trip": Scenario("/detokenize", own_tokens, round_trip),
        # the body
        "error_malformed_json": Scenario("/v1/chat/completions", b'{"model": '),
        "error_empty_body": Scenario("/v1/chat/completions", b""),
        "error_body_not_an_object": Scenario("/v1/completions", b"[1]"),
        "error_body_not_utf8": Scenario("/v1/chat/completions", b'{"model": "\xff"}'),
        # parameters of the wrong type (pydantic, before vLLM's handler)
        "error_max_tokens_not_an_integer": chat(max_tokens="abc"),
        "error_max_tokens_fraction": completion(max_tokens=1.5),
        "error_temperature_not_a_number": chat(temperature="hot"),
        "error_stream_not_a_boolean": chat(stream="maybe"),
        "error_stream_options_not_an_object": chat(stream=True, stream_options="x"),
        "error_include_usage_not_a_boolean": chat(
            stream=True, stream_options={"include_usage": "x"}
        ),
        "error_model_not_a_string": chat(model=3),
        "error_stop_not_strings": chat(stop=[1]),
        "error_ignore_eos_null": chat(ignore_eos=None),
        "error_two_bad_fields": chat(temperature="hot", max_tokens="abc"),
        "error_messages_not_a_list": chat(messages="not a list"),
        "error_messages_missing": Scenario("/v1/chat/completions", _json({"model": model})),
        "error_messages_null": chat(messages=None),
        "error_message_not_an_object": chat(messages=[1]),
        "error_message_content_not_text": chat(messages=[{"role": "user", "content": 3}]),
        "error_prompt_not_text_or_tokens": completion(prompt={"a": 1}),
        "error_prompt_negative_token": completion(prompt=[-1]),
        # vLLM's own checks of values
        "error_stream_options_without_stream": chat(stream_options=USAGE),
        "error_prompt_missing": Scenario("/v1/completions", _json({"model": model})),
        "error_prompt_empty_list": completion(prompt=[]),
        "error_messages_empty": chat(messages=[]),
        "error_unknown_model": chat(model="no-such-model"),
        "error_max_tokens_negative": chat(max_tokens=-1),
        "error_max_tokens_over_max_model_len": completion(max_tokens=MAX_MODEL_LEN + 1),
        "error_max_completion_tokens_over_max_model_len": chat(
            max_completion_tokens=MAX_MODEL_LEN + 1
        ),
        "error_prompt_too_long": completion(prompt=[*ids, 5]),
        "error_chat_prompt_too_long": chat(messages=[{"role": "user", "content": long_text}]),
        "error_prompt_fills_the_context": completion(prompt=ids, max_tokens=None),
        "error_temperature_negative": chat(temperature=-1),
        "error_top_p_out_of_range": chat(top_p=2),
        "error_n_zero": chat(n=0),
        "error_n_under_greedy_sampling": chat(n=2),
        "error_empty_stop_string": chat(stop=[""]),
        # /tokenize, /detokenize
        "error_tokenize_without_prompt": Scenario("/tokenize", _json({"model": model})),
        "error_tokenize_unknown_model": Scenario(
            "/tokenize", _json({"model": "no-such-model", "prompt": PROMPT})
        ),
        "error_detokenize_tokens_missing": detokenize({}),
        "error_detokenize_tokens_not_a_list": detokenize({"tokens": "abc"}),
        "error_detokenize_negative_token": detokenize({"tokens": [-1]}),
        "error_detokenize_bad_tokens": detokenize({"tokens": [1, "x", 2**63, 1.5, None, [1]]}),
        "error_detokenize_unknown_model": Scenario(
            "/detokenize", _json({"model": "no-such-model", "tokens": [1]})
        ),
    }


def captured_names(model: str) -> list[str]:
    """What a capture holds: every scenario, and the compact "lax_coercion" record."""
    return [*scenarios(model), "lax_coercion"]


def _json(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body)


# How loosely pydantic reads each parameter the simulator uses (lax mode: strings that read as
# numbers or booleans, floats that are whole, ...): field -> values, each sent in a one-token
# chat request. Recorded compactly under "lax_coercion": status, and the error if refused.
COERCIONS: dict[str, list[Any]] = {
    "max_tokens": [
        "2", " 2 ", "2.0", "+2", "1_0", "2.5", "1e3", "", "0x10", "٢", 2.0, 2.5, True, [2],
        {}, 1e20, -0.0, None,
    ],
    "temperature": [
        "0", " 0.5 ", "1e-1", ".5", "5.", "1_0", "nan", "-inf", "-0", True, "", "hot", [0],
        None,
    ],
    "top_p": ["0.5", "1", "0", "abc", 1, None],
    "stream": [
        "yes", "no", "Y", "off", "TRUE", "t", 1, 0, 0.0, 1.0, 2, 2.0, 1.5, "", " yes", "2",
        [], {}, None,
    ],
    "ignore_eos": ["f", "on", 1.0, 2, None, []],
    "n": ["1", 1.0, "1.5", True, None, "one"],
    "model": ["", None, 3, ["tiny"], "tiny "],
    "stop": ["x", ["x"], [], "", [None], 3, {}, None],
    "max_completion_tokens": ["2", 0.5, None],
    "add_generation_prompt": ["no", 3],
}  # fmt: skip


def coercion_cases(model: str) -> dict[str, bytes]:
    base = {"model": model, "messages": MESSAGES, "max_tokens": 1, "temperature": 0}
    cases = {}
    for field, values in COERCIONS.items():
        for value in values:
            body = {**base, field: value}
            if field == "max_tokens" and value is None:
                # null is accepted and means "up to max_model_len": ~8,000 tokens, a minute
                # on CPU; max_completion_tokens bounds the answer and leaves null's check alone
                body["max_completion_tokens"] = 1
            cases[f"{field}={orjson.dumps(value).decode()}"] = orjson.dumps(body)
    return cases


_VALIDATION_HEADER = re.compile(r"(\d+) validation errors?:\n")


def message_shape(message: str) -> Any:
    """An error message for comparison. vLLM's validation message (`N validation errors:`
    and one printed dict per error) becomes {"validation_errors": N, "errors": [dict, ...]}
    (and "more": its `...and K more errors` line), each dict as printed, so a difference
    names the error and the key; nothing is dropped. Any other message stays as it is."""
    header = _VALIDATION_HEADER.match(message)
    if not header:
        return message
    shaped: dict[str, Any] = {"validation_errors": int(header[1]), "errors": []}
    for line in message[header.end() :].split("\n"):
        line = line.strip()
        if line.startswith("{"):
            try:
                shaped["errors"].append(ast.literal_eval(line))
            except (ValueError, SyntaxError):  # cut short by vLLM ("...[truncated]")
                shaped["errors"].append(line)
        else:
            shaped["more"] = line
    return shaped


def response_shape(response: httpx.Response) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    record: dict[str, Any] = {
        "status": response.status_code,
        "content_type": content_type,
        "request_id_echoed": response.headers.get("x-request-id") == REQUEST_ID,
        "headers": sorted(response.headers.keys() - TRANSPORT_HEADERS),
    }
    if content_type.startswith("text/event-stream"):
        record["events"] = stream_shape(response.content)
        return record
    try:
        body = response.json()
    except ValueError:  # not JSON at all (a plain-text 404 or 500): a shape of its own
        record["body"] = f"not JSON: {response.text[:80]!r}"
        return record
    record["body"] = shape(body)
    if response.status_code >= 400 and isinstance(body, dict):  # the error object is the format
        error = body.get("error", body)
        record["error"] = {
            "type": error.get("type"),
            "code": error.get("code"),
            "param": error.get("param"),
            # FastAPI's own errors are {"detail": message}
            "message": message_shape(str(error.get("message", error.get("detail")))),
        }
    return record


def capture(url: str, model: str) -> dict[str, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "X-Request-Id": REQUEST_ID}
    captured = {}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for name, scenario in scenarios(model).items():
            body = scenario.body if isinstance(scenario.body, bytes) else scenario.body(client)
            response = client.post(scenario.path, content=body)
            captured[name] = response_shape(response)
            if scenario.facts and not str(captured[name].get("body")).startswith("not JSON"):
                captured[name].update(scenario.facts(response.json()))
        captured["lax_coercion"] = {
            case: outcome(client.post("/v1/chat/completions", content=body))
            for case, body in coercion_cases(model).items()
        }
    return captured


def outcome(response: httpx.Response) -> dict[str, Any]:
    """A compact record: the status, and the error object when refused."""
    record = response_shape(response)
    return {"status": record["status"], **({"error": record["error"]} if "error" in record else {})}


def capture_sim(model: str) -> dict[str, dict[str, Any]]:
    """The same capture from loadgen.sim (fixed timing, 1 ms per token) serving `model`."""
    port = free_port()
    app = create_app(ttft=0.001, itl=0.001, served_model_name=model, max_model_len=MAX_MODEL_LEN)
    with ServerThread(app, port):
        return capture(f"http://127.0.0.1:{port}", model)


def paths(value: Any, prefix: str = "") -> set[str]:
    """A shape flattened to `path: type` lines, so two shapes diff key by key. A stream's
    events keep their position (`.events[2]`), list items share one (`.choices[]`)."""
    if isinstance(value, dict):
        return {line for key, item in value.items() for line in paths(item, f"{prefix}.{key}")}
    if isinstance(value, list) and value:  # events and validation errors keep their order
        positional = prefix.endswith((".events", ".errors"))
        return {
            line
            for i, item in enumerate(value)
            for line in paths(item, f"{prefix}[{i if positional else ''}]")
        }
    return {f"{prefix}: {value}"}


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs between two captures, one `path: type` line per side."""
    want, got = paths(expected), paths(actual)
    return [f"only vLLM {line}" for line in sorted(want - got)] + [
        f"only other {line}" for line in sorted(got - want)
    ]


def load_fixture() -> dict[str, Any]:
    return orjson.loads(FIXTURE.read_bytes())


def save_fixture(captured: dict[str, Any]) -> None:
    FIXTURE.write_bytes(orjson.dumps(captured, option=orjson.OPT_INDENT_2) + b"\n")
