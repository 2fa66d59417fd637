"""Reading a request as vLLM reads it: parsing, validation and admission. Pure, no I/O.

The requests vLLM 0.32 accepts and the order it refuses them in (recorded in
tests/real_vllm/vllm_wire.json) are a contract of their own, apart from what the simulator
answers (responses.py): a client that works against the simulator must meet the same
refusals on vLLM. errors.py words the refusals; validation.py coerces fields as pydantic does.

A request is refused as vLLM refuses it, in vLLM's order:
1. the body is read as FastAPI reads it: empty, not JSON or not an object is a validation
   error (`body`, `body.<offset>`);
2. vLLM's `mode="before"` model validators see the raw JSON: completions without a prompt,
   chat `messages: null` (one of them fails iterating it), `stream_options` with a falsy
   `stream` (`BadRequestError`);
3. the fields are validated as pydantic does, lax (validation.py), every error at once, in
   the field order of vLLM's request models (a message object's contents are left to the
   tokenizer, whose complaint is the simulator's own: see KNOWN_SIM_MISMATCHES in
   tests/real_vllm/wire_format.py);
4. the server then checks the model (app.py: 404) and `admit` the rest: max_tokens against
   max_model_len, an empty conversation or prompt list, the prompt's length, then
   SamplingParams' checks (n, temperature, top_p, max_tokens ≥ 1, empty stop strings, n
   under greedy sampling).
A prompt + max_tokens beyond max_model_len is not an error: max_tokens is cut to what is
left, as vLLM 0.32 does. Fields the simulator does not use are not validated.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.model.tokenizer import SIMPLE, Tokenizer
from loadgen.sim.wire.errors import (
    ApiError,
    FieldError,
    invalid,
    unparsable_body,
    validation_failed,
)
from loadgen.sim.wire.validation import (
    Fields,
    Invalid,
    Loc,
    bad,
    bounded,
    either,
    lax_bool,
    lax_float,
    lax_int,
    list_of,
    not_an_object,
    strict_str,
)

COMPLETIONS_MAX_TOKENS = 16  # CompletionRequest's default in vLLM (chat has none)
EMPTY_CONVERSATION = (
    "Cannot apply chat template to an empty conversation. Provide at least one message."
)
# vLLM's chat message is a union of these: an item that is no object fails every one
_MESSAGE_TYPES = (
    "ChatCompletionDeveloperMessageParam",
    "ChatCompletionSystemMessageParam",
    "ChatCompletionUserMessageParam",
    "ChatCompletionAssistantMessageParam",
    "ChatCompletionToolMessageParam",
    "ChatCompletionFunctionMessageParam",
    "CustomChatCompletionMessageParam",
)
_MESSAGE_MODEL = "Message"  # the union's last member, a pydantic model
_GREEDY = 1e-5  # vLLM's _SAMPLING_EPS: a lower temperature is greedy sampling
_TOKEN_ID = bounded(lax_int, ge=0)
_MAX_DETOKENIZE_ID = 2**63 - 1
# orjson reads an integer beyond 64 bits as a float where json reads an int: leave those to json
_LONG_NUMBER = re.compile(rb"[0-9]{20}")


@dataclass(slots=True)
class GenerationRequest:
    chat: bool
    model: str | None
    prompt: list[str]  # prompt tokens (tokenizer.py); the text itself is not kept
    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"  # the field it came from (max_completion_tokens)
    token_ids: bool = False  # a prompt of token ids: its length is exact, however long
    no_prompt: bool = False  # an empty conversation / prompt list (refused by `admit`)
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1


@dataclass(slots=True)
class TokenizeRequest:
    model: str | None
    prompt: str | None  # a text prompt, or
    messages: list[dict[str, Any]] | None  # a conversation
    add_generation_prompt: bool = True
    token_strs: bool = False


def parse_json(body: bytes) -> Any:
    """The body as FastAPI reads it (`json.loads`), or vLLM's 400 for one it cannot."""
    if not body:
        raise validation_failed([FieldError("missing", ("body",), "Field required", None)])
    if not _LONG_NUMBER.search(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # orjson is stricter than json (NaN, Infinity): FastAPI's json decides
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        error = FieldError(
            "json_invalid", ("body", exc.pos), "JSON decode error", {}, {"error": exc.msg}
        )
        raise validation_failed([error]) from None
    except ValueError:  # not UTF-8 text
        raise unparsable_body() from None


def _object(data: Any, branches: int = 1) -> dict[str, Any]:
    """The body as a JSON object; else one error per member of the request's union."""
    if not isinstance(data, dict):
        raise validation_failed([not_an_object(("body",), data)] * branches)
    return data


def parse_generation(body: bytes, chat: bool, rules: Tokenizer = SIMPLE) -> GenerationRequest:
    """Validate a /v1/chat/completions (chat) or /v1/completions body, as far as vLLM does
    before its handler runs (the server then checks the model and calls `admit`); the
    prompt is counted by `rules`."""
    data = _object(parse_json(body))
    # vLLM's before-validators, on the raw JSON (a falsy value is "not given")
    if chat and "messages" in data and data["messages"] is None:
        raise ApiError(400, "'NoneType' object is not iterable")  # one of them iterates it
    if not chat and data.get("prompt") in (None, "") and not data.get("prompt_embeds"):
        raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if data.get("stream_options") and not data.get("stream"):
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")

    # the fields, in the order of vLLM's ChatCompletionRequest / CompletionRequest
    fields = Fields(data)
    messages = fields.get("messages", _messages, required=True) if chat else None
    model = fields.get("model", strict_str)
    prompt = None if chat else fields.get("prompt", _prompt)
    max_tokens = fields.get("max_tokens", lax_int)
    max_completion_tokens = fields.get("max_completion_tokens", lax_int) if chat else None
    n = fields.get("n", lax_int, default=1, nullable=chat)
    stop = fields.get("stop", either(strict_str, list_of(strict_str)))
    stream = fields.get("stream", lax_bool)
    options = fields.obj("stream_options", _stream_options)
    temperature = fields.get("temperature", lax_float)
    top_p = fields.get("top_p", lax_float)
    ignore_eos = fields.get("ignore_eos", lax_bool, default=False, nullable=False)
    generation_prompt = (
        fields.get("add_generation_prompt", lax_bool, default=True, nullable=False)
        if chat
        else True
    )
    if fields.errors:
        raise validation_failed(fields.errors)

    req = GenerationRequest(chat=chat, model=model, prompt=[])
    if max_completion_tokens is not None:
        req.max_tokens, req.max_tokens_param = max_completion_tokens, "max_completion_tokens"
    else:
        req.max_tokens = max_tokens
    if chat:
        req.no_prompt = not messages
        req.prompt = _chat_tokens(messages or [], generation_prompt, rules)
    else:
        req.prompt, req.token_ids, req.no_prompt = _completion_prompt(prompt, rules)
    req.n = 1 if n is None else n
    req.stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    req.stream = bool(stream)
    req.temperature = temperature
    req.top_p = top_p
    req.ignore_eos = ignore_eos
    if options is not None and req.stream:
        req.include_usage, continuous = options
        req.continuous_usage = req.include_usage and continuous
    return req


def admit(req: GenerationRequest, max_model_len: int) -> int:
    """The checks vLLM's server makes once the request is valid and its model served, in
    vLLM's order; returns the max_tokens it will run with (at most what the context has
    left, as vLLM 0.32 cuts it)."""
    if req.max_tokens is not None and req.max_tokens > max_model_len:
        name = req.max_tokens_param
        raise invalid(
            f"{name}={req.max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            name,
            req.max_tokens,
        )
    if req.no_prompt:
        raise ApiError(400, EMPTY_CONVERSATION if req.chat else "You must pass at least one prompt")
    prompt = len(req.prompt)
    if prompt > max_model_len:
        # vLLM's tokenizer stops one token past the limit; a token-id prompt is counted whole
        count = prompt if req.token_ids else max_model_len + 1
        at_least = "at least " if count == max_model_len + 1 else ""
        raise invalid(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {at_least}{count} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            count,
        )
    room = max_model_len - prompt
    requested = req.max_tokens
    if requested is None and not req.chat:
        requested = COMPLETIONS_MAX_TOKENS
    max_tokens = room if requested is None else min(room, requested)
    # SamplingParams._verify_args, in its order
    if req.n < 1:
        raise ApiError(400, f"n must be at least 1, got {req.n}.")
    temperature = req.temperature
    if temperature is not None:
        if not math.isfinite(temperature):
            message = f"temperature must be a finite number, got {temperature}."
            raise invalid(message, "temperature", temperature)
        if temperature < 0:
            message = f"temperature must be non-negative, got {temperature}."
            raise invalid(message, "temperature", temperature)
        if temperature > 2:
            message = f"temperature must be in [0, 2], got {temperature}."
            raise invalid(message, "temperature", temperature)
    if req.top_p is not None and not 0 < req.top_p <= 1:
        raise invalid(f"top_p must be in (0, 1], got {req.top_p}.", "top_p", req.top_p)
    if max_tokens < 1:
        message = f"max_tokens must be at least 1, got {max_tokens}."
        raise invalid(message, "max_tokens", max_tokens)
    if any(not s for s in req.stop):
        raise ApiError(400, "stop cannot contain an empty string.")
    if req.n > 1 and temperature is not None and temperature < _GREEDY:
        raise ApiError(400, f"n must be 1 when using greedy sampling, got {req.n}.")
    if req.n != 1:  # the simulator's own limit (vLLM would sample n choices)
        raise ApiError(400, "n must be 1: the simulator generates one choice.", "n")
    return max_tokens


def parse_tokenize(body: bytes) -> TokenizeRequest:
    """A /tokenize body: vLLM's union of a text request and a chat request (chat wins when
    both fit; when neither does, both members' errors are reported)."""
    data = _object(parse_json(body), branches=2)
    text = Fields(data)
    model = text.get("model", strict_str)
    prompt = text.get("prompt", strict_str, required=True)
    text.get("add_special_tokens", lax_bool, nullable=False)
    text_strs = text.get("return_token_strs", lax_bool)
    chat = Fields(data)
    chat.get("model", strict_str)
    messages = chat.get("messages", _messages, required=True)
    generation_prompt = chat.get("add_generation_prompt", lax_bool, default=True, nullable=False)
    chat_strs = chat.get("return_token_strs", lax_bool)
    chat.get("continue_final_message", lax_bool, nullable=False)
    chat.get("add_special_tokens", lax_bool, nullable=False)
    if not chat.errors:
        return TokenizeRequest(model, None, messages, generation_prompt, bool(chat_strs))
    if not text.errors:
        return TokenizeRequest(model, prompt, None, token_strs=bool(text_strs))
    raise validation_failed(text.errors + chat.errors)


def tokenize_tokens(req: TokenizeRequest, rules: Tokenizer = SIMPLE) -> list[str]:
    if req.messages is None:
        return rules.prompt(req.prompt or "")
    if not req.messages:
        raise ApiError(400, EMPTY_CONVERSATION)
    return _chat_tokens(req.messages, req.add_generation_prompt, rules)


def parse_detokenize(body: bytes) -> tuple[str | None, list[int]]:
    """A /detokenize body: the model and the token ids (0 ≤ id < 2**63, as vLLM bounds them)."""
    fields = Fields(_object(parse_json(body)))
    model = fields.get("model", strict_str)
    ids = list_of(bounded(lax_int, ge=0, le=_MAX_DETOKENIZE_ID))
    tokens = fields.get("tokens", ids, required=True, nullable=False, default=[])
    if fields.errors:
        raise validation_failed(fields.errors)
    return model, tokens


def _messages(value: Any) -> list[dict[str, Any]]:
    """`list[ChatCompletionMessageParam]`: an item that is no object fails every member of
    the union. Objects are taken as they are (what is inside is the tokenizer's business)."""
    if not isinstance(value, list):
        raise bad("list_type", "Input should be a valid list", value)
    errors: list[tuple[Loc, str, str, Any, dict[str, Any] | None]] = []
    for index, item in enumerate(value):
        if isinstance(item, dict):
            continue
        for name in _MESSAGE_TYPES:
            message = "Input should be a valid dictionary"
            errors.append(((index, name), "dict_type", message, item, None))
        error = not_an_object((index, _MESSAGE_MODEL), item)
        errors.append((error.loc, error.kind, error.msg, item, None))
    if errors:
        raise Invalid(errors)
    return value


def _prompt(value: Any) -> tuple[str, Any]:
    """CompletionRequest.prompt: `list[int≥0] | list[list[int≥0]] | str | list[str]`, as
    pydantic's smart union takes it: an exact (strict) match first, then the first member
    that accepts the value under lax coercion, else every member's errors in order."""
    if isinstance(value, str):
        return "text", value
    if isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            return "texts", value
        if all(_strict_id(item) for item in value):
            return "ids", value
        if all(isinstance(item, list) and all(map(_strict_id, item)) for item in value):
            return "id_lists", value
    errors = []
    for kind, member in (
        ("ids", list_of(_TOKEN_ID)),
        ("id_lists", list_of(list_of(_TOKEN_ID))),
        ("text", strict_str),
        ("texts", list_of(strict_str)),
    ):
        try:
            return kind, member(value)
        except Invalid as exc:
            errors.extend(exc.errors)
    raise Invalid(errors)


def _strict_id(value: Any) -> bool:
    return type(value) is int and value >= 0


def _completion_prompt(
    prompt: tuple[str, Any] | None, rules: Tokenizer
) -> tuple[list[str], bool, bool]:
    """(prompt tokens, given as token ids, empty). The simulator serves one prompt."""
    kind, value = prompt or ("text", "")
    if kind in ("texts", "id_lists"):  # a batch of prompts
        if not value:
            return [], False, True
        if len(value) > 1:
            raise ApiError(
                400, "prompt must be a string or a list of token ids (one prompt).", "prompt"
            )
        kind, value = ("text" if kind == "texts" else "ids"), value[0]
    if kind == "ids":
        return [str(t) for t in value], True, not value
    return rules.prompt(value), False, False


def _chat_tokens(
    messages: list[dict[str, Any]], generation_prompt: bool, rules: Tokenizer
) -> list[str]:
    try:
        return rules.chat(messages, generation_prompt)
    except TypeError as exc:  # content that is no text: not vLLM's wording (see README)
        raise ApiError(400, str(exc), "messages") from None


def _stream_options(fields: Fields) -> tuple[bool, bool]:
    include_usage = fields.get("include_usage", lax_bool)
    continuous = fields.get("continuous_usage_stats", lax_bool)
    return bool(include_usage), bool(continuous)
