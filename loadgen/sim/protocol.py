"""The OpenAI-compatible wire format as vLLM speaks it: request validation, response and
chunk shapes, error bodies. Pure, no I/O.

Shapes follow vLLM 0.32 (vllm/entrypoints/openai/{chat_completion,completion}/protocol.py
and serving.py), recorded in tests/real_vllm/vllm_wire.json: errors are
{"error": {"message", "type", "param", "code"}} with code = the HTTP status; chat streams
open with a role-only chunk; the chunk carrying the last token also carries finish_reason
and stop_reason; `stream_options.include_usage` adds a final chunk with empty choices and
the usage, and `continuous_usage_stats` puts the running usage on every chunk.

vLLM serializes full responses with every field (its unused features as null) and stream
chunks with only the fields it set (`exclude_unset`), so which nulls appear where is part
of the format: the role chunk sets prompt_token_ids/prompt_text, content chunks token_ids,
the last message of a stream (the usage chunk if asked for, else the finishing chunk)
system_fingerprint. The final usage chunk drops its nulls (`exclude_none`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim import tokenizer

DONE = b"data: [DONE]\n\n"
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError"}
# vLLM's handler for a body FastAPI could not validate names the type by the HTTP phrase
_INVALID_BODY = "Bad Request"


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or _ERROR_TYPES.get(status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def _invalid_body(kind: str, loc: str, msg: str, ctx: str | None = None) -> ApiError:
    """A body FastAPI rejects before vLLM sees it, reported as vLLM's validation handler
    does: type "Bad Request", param the error's location (`body`, `body.<offset>`)."""
    error: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg}
    if ctx is not None:
        error["ctx"] = {"error": ctx}
    return ApiError(400, f"1 validation error:\n  {error}", loc, _INVALID_BODY)


@dataclass(slots=True)
class GenerationRequest:
    chat: bool
    model: str | None
    prompt: list[str]  # prompt tokens (tokenizer.py); the text itself is not kept
    max_tokens: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1


def parse_json(body: bytes) -> dict[str, Any]:
    if not body:
        raise _invalid_body("missing", "body", "Field required")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _invalid_body(
            "json_invalid", f"body.{exc.pos}", "JSON decode error", exc.msg
        ) from None
    if not isinstance(data, dict):
        raise _invalid_body(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
        )
    return data


def parse_generation(body: bytes, chat: bool) -> GenerationRequest:
    """Validate a /v1/chat/completions (chat) or /v1/completions body."""
    data = parse_json(body)
    req = GenerationRequest(
        chat=chat, model=_optional(data, "model", str), prompt=prompt_tokens(data, chat)
    )
    max_tokens = _optional(data, "max_completion_tokens", int) if chat else None
    req.max_tokens = max_tokens if max_tokens is not None else _optional(data, "max_tokens", int)
    if req.max_tokens is not None and req.max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
    n = _optional(data, "n", int)
    if n not in (None, 1):
        raise ApiError(400, "n must be 1: the simulator generates one choice.", "n")
    req.ignore_eos = bool(_optional(data, "ignore_eos", bool))
    req.stream = bool(_optional(data, "stream", bool))
    req.temperature = _optional(data, "temperature", float)
    req.top_p = _optional(data, "top_p", float)
    req.stop = _stop(data.get("stop"))
    options = _optional(data, "stream_options", dict)
    if options is not None:
        if not req.stream:
            raise ApiError(
                400, "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        req.include_usage = bool(_optional(options, "include_usage", bool))
        req.continuous_usage = req.include_usage and bool(
            _optional(options, "continuous_usage_stats", bool)
        )
    return req


def prompt_tokens(data: dict[str, Any], chat: bool) -> list[str]:
    """The prompt's tokens: `messages` for chat, `prompt` for completions (a string, a list
    of token ids, or a one-element list of either)."""
    if chat or "messages" in data:
        messages = data.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) for m in messages)
        ):
            raise ApiError(400, "messages must be a non-empty list of message objects.", "messages")
        try:
            return tokenizer.chat_tokens(messages, bool(data.get("add_generation_prompt", True)))
        except TypeError as exc:
            raise ApiError(400, str(exc), "messages") from None
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.text_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return [str(t) for t in prompt]
    raise ApiError(400, "prompt must be a string or a list of token ids (one prompt).", "prompt")


def _optional(data: dict[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if kind is float and type(value) is int:
        return float(value)
    if type(value) is not kind:
        raise ApiError(400, f"{key} must be of type {kind.__name__}.", key)
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise ApiError(400, "stop must be a string or a list of strings.", "stop")


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """vLLM's UsageInfo with only the counts set (the final usage chunk, the per-chunk
    usage of completions streams)."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def system_fingerprint(config: str) -> str:
    """The backend configuration in a short string, as vLLM's `vllm-<version>-<hash8>`: the
    simulator's config is what drives its timing (its model name and preset or figures)."""
    return f"loadgen-sim-{hashlib.sha256(config.encode()).hexdigest()[:8]}"


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ChunkWriter:
    """Builds the SSE events of one streamed response."""

    def __init__(
        self, req: GenerationRequest, response_id: str, model: str, fingerprint: str
    ) -> None:
        self._chat = req.chat
        self._prompt = len(req.prompt)
        self._continuous = req.continuous_usage
        self._include_usage = req.include_usage
        self._fingerprint = fingerprint
        # the fingerprint goes on the last message: the usage chunk when there is one
        self._finishing = {} if req.include_usage else {"system_fingerprint": fingerprint}
        # chat sets completion_tokens_details (no reasoning parser: null) on running usage
        self._usage_details = {"completion_tokens_details": None} if req.chat else {}
        self._head = {
            "id": response_id,
            "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }

    def role(self) -> bytes:
        """The chat stream's first, content-free chunk."""
        return self._event(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            },
            0,
            {"prompt_token_ids": None, "prompt_text": None},
        )

    def content(
        self,
        text: str,
        completion_tokens: int,
        finish_reason: str | None = None,
        stop_reason: str | None = None,
    ) -> bytes:
        if self._chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = stop_reason
            choice["token_ids"] = None
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        finishing = self._finishing if finish_reason is not None else None
        return self._event(choice, completion_tokens, finishing)

    def tail(self, completion_tokens: int) -> bytes:
        """The final usage chunk (if asked for) and [DONE]."""
        if not self._include_usage:
            return DONE
        final = {
            **self._head,
            "choices": [],
            "usage": usage(self._prompt, completion_tokens),
            "system_fingerprint": self._fingerprint,
        }
        return sse(final) + DONE

    def _event(
        self, choice: dict[str, Any], completion_tokens: int, extra: dict[str, Any] | None
    ) -> bytes:
        payload = {**self._head, "choices": [choice]}
        if self._continuous:
            payload["usage"] = {**usage(self._prompt, completion_tokens), **self._usage_details}
        if extra:
            payload.update(extra)
        return sse(payload)


def full_response(
    req: GenerationRequest,
    response_id: str,
    model: str,
    fingerprint: str,
    text: str,
    completion_tokens: int,
    finish_reason: str,
    stop_reason: str | None,
) -> dict[str, Any]:
    """The body of a non-streamed response: every field of vLLM's response model, those of
    features the simulator lacks (logprobs, token ids, reasoning, tools, KV transfer,
    per-request metrics, ...) null."""
    if req.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {  # vLLM drops tool_calls when empty
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "token_ids": None,
            "routed_experts": None,
        }
        prompt_fields = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "token_ids": None,
            "prompt_logprobs": None,  # completions carry the prompt's fields per choice
            "prompt_token_ids": None,
            "routed_experts": None,
        }
        prompt_fields = {}
    return {
        "id": response_id,
        "object": "chat.completion" if req.chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {
            **usage(len(req.prompt), completion_tokens),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        **prompt_fields,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }
