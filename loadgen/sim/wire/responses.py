"""Answering as vLLM answers: the bodies and stream chunks it writes, and the ASGI responses
that send them.

Shapes follow vLLM 0.32 (vllm/entrypoints/openai/{chat_completion,completion}/protocol.py
and serving.py), recorded in tests/real_vllm/vllm_wire.json: chat streams open with a
role-only chunk; the chunk carrying the last token also carries finish_reason and
stop_reason; `stream_options.include_usage` adds a final chunk with empty choices and the
usage, and `continuous_usage_stats` puts the running usage on every chunk.

vLLM serializes full responses with every field (its unused features as null) and stream
chunks with only the fields it set (`exclude_unset`), so which nulls appear where is part
of the format: the role chunk sets prompt_token_ids/prompt_text, content chunks token_ids,
the last message of a stream (the usage chunk if asked for, else the finishing chunk)
system_fingerprint. The final usage chunk drops its nulls (`exclude_none`).

A real server aborts a request whose client disconnected and frees its batch slot; the
simulator must too, for streamed and non-streamed requests alike. Each response
(`EventStream`, `DeferredJSON`) watches `receive()` for `http.disconnect` in one helper task
and cancels the generation when it comes; the generation's own cleanup (closing its async
iterator) then frees the slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from loadgen.sim.wire.requests import GenerationRequest
from loadgen.sim.wire.serving import reasoning_delta

DONE = b"data: [DONE]\n\n"

Headers = list[tuple[bytes, bytes]]


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _run_or_abandon(receive: Receive, work: Awaitable[None]) -> None:
    """Run `work` unless the client disconnects first (then cancel it quietly)."""
    task = asyncio.current_task()
    assert task is not None

    async def watch() -> None:
        await _until_disconnect(receive)
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        await work
    except asyncio.CancelledError:
        if not watcher.done() or watcher.cancelled():
            raise
        task.uncancel()
    finally:
        watcher.cancel()


class EventStream:
    """text/event-stream from an async generator of ready-made SSE bytes (closed when the
    response ends, however it ends)."""

    def __init__(self, events: AsyncGenerator[bytes, None], headers: Headers) -> None:
        self._events = events
        # vLLM's StreamingResponse: no cache-control
        self._headers = [(b"content-type", b"text/event-stream; charset=utf-8"), *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await _run_or_abandon(receive, self._stream(send))
        finally:
            await self._events.aclose()

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        async for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class DeferredJSON:
    """A JSON body that takes time to compute (a non-streamed generation)."""

    def __init__(self, compute: Callable[[], Awaitable[Any]], headers: Headers) -> None:
        self._compute = compute
        self._headers = [(b"content-type", b"application/json"), *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _run_or_abandon(receive, self._respond(send))

    async def _respond(self, send: Send) -> None:
        body = orjson.dumps(await self._compute())
        headers = [*self._headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


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


def _text_choice(
    text: str, finish_reason: str | None, stop_reason: str | None, **tail: None
) -> dict[str, Any]:
    """A /v1/completions choice, streamed or whole: the fields both share, then `tail`'s,
    in vLLM's order."""
    return {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        **tail,
    }


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ChunkWriter:
    """Builds the SSE events of one streamed response."""

    def __init__(
        self,
        req: GenerationRequest,
        response_id: str,
        model: str,
        fingerprint: str,
        *,
        prompt_tokens: int | None = None,
        created: int | None = None,
        reasoning: int | None = None,
    ) -> None:
        """`prompt_tokens` (default: the prompt's count) and `created` (default: now) are
        for a scripted answer (script.py); `reasoning` is the answer's reasoning tokens
        under a reasoning parser (None: no parser)."""
        self._chat = req.chat
        self._prompt = len(req.prompt) if prompt_tokens is None else prompt_tokens
        self._continuous = req.continuous_usage
        self._include_usage = req.include_usage
        self._fingerprint = fingerprint
        # the fingerprint goes on the last message: the usage chunk when there is one
        self._finishing = {} if req.include_usage else {"system_fingerprint": fingerprint}
        # chat sets completion_tokens_details (no reasoning parser: null) on running usage
        self._reasoning = reasoning if req.chat else None
        self._head = {
            "id": response_id,
            "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": int(time.time()) if created is None else created,
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
        reasoning: str = "",
    ) -> bytes:
        """A chunk of `text` (and, under a reasoning parser, `reasoning` before it)."""
        if self._chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": reasoning_delta(reasoning, text) if reasoning else {"content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = stop_reason
            choice["token_ids"] = None
        else:
            choice = _text_choice(
                text, finish_reason, stop_reason, prompt_token_ids=None, token_ids=None
            )
        finishing = self._finishing if finish_reason is not None else None
        return self._event(choice, completion_tokens, finishing)

    def tail(
        self,
        completion_tokens: int,
        prompt_details: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> bytes:
        """The final usage chunk (if asked for) and [DONE]; vLLM drops its nulls."""
        if not self._include_usage:
            return DONE
        final_usage = usage(self._prompt, completion_tokens)
        if prompt_details is not None:
            final_usage["prompt_tokens_details"] = prompt_details
        if self._reasoning is not None:
            final_usage["completion_tokens_details"] = {"reasoning_tokens": self._reasoning}
        final: dict[str, Any] = {
            **self._head,
            "choices": [],
            "usage": final_usage,
            "system_fingerprint": self._fingerprint,
        }
        if metrics is not None:
            final["metrics"] = {k: v for k, v in metrics.items() if v is not None}
        return sse(final) + DONE

    def _event(
        self, choice: dict[str, Any], completion_tokens: int, extra: dict[str, Any] | None
    ) -> bytes:
        payload: dict[str, Any] = {**self._head, "choices": [choice]}
        if self._continuous:
            payload["usage"] = usage(self._prompt, completion_tokens)
            if self._chat:
                running = self._reasoning
                payload["usage"]["completion_tokens_details"] = (
                    None
                    if running is None
                    else {"reasoning_tokens": min(running, completion_tokens)}
                )
        if extra:
            payload.update(extra)
        return sse(payload)


def _message_choice(
    text: str, finish_reason: str, stop_reason: str | None, reasoning: str | None
) -> dict[str, Any]:
    """A chat answer's one choice, whole."""
    return {
        "index": 0,
        "message": {  # vLLM drops tool_calls when empty
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": reasoning,
        },
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": None,
        "routed_experts": None,
    }


def full_response(
    req: GenerationRequest,
    response_id: str,
    model: str,
    fingerprint: str,
    text: str,
    completion_tokens: int,
    finish_reason: str,
    stop_reason: str | None,
    *,
    prompt_tokens: int | None = None,
    created: int | None = None,
    reasoning: tuple[int, str] | None = None,
    prompt_details: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of a non-streamed response: every field of vLLM's response model, those of
    features the simulator lacks (logprobs, token ids, tools, KV transfer, ...) null.
    `prompt_tokens` and `created` as for ChunkWriter; `reasoning` (tokens, text) under a
    reasoning parser, `prompt_details` and `metrics` as serving.Serving makes them."""
    reasoning_text = None
    completion_details = None
    if reasoning is not None and req.chat:
        completion_details = {"reasoning_tokens": reasoning[0]}
        reasoning_text = reasoning[1] or None
    if req.chat:
        choice = _message_choice(text, finish_reason, stop_reason, reasoning_text)
        prompt_fields = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    else:
        choice = _text_choice(  # completions carry the prompt's fields per choice
            text,
            finish_reason,
            stop_reason,
            token_ids=None,
            prompt_logprobs=None,
            prompt_token_ids=None,
            routed_experts=None,
        )
        prompt_fields = {}
    return {
        "id": response_id,
        "object": "chat.completion" if req.chat else "text_completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {
            **usage(len(req.prompt) if prompt_tokens is None else prompt_tokens, completion_tokens),
            "prompt_tokens_details": None
            if prompt_details is None
            else {
                "cached_tokens": prompt_details["cached_tokens"],
                "created_cache_tokens": prompt_details.get("created_cache_tokens"),
                "multimodal_tokens": None,
            },
            "completion_tokens_details": completion_details,
        },
        **prompt_fields,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None
        if metrics is None
        else {**metrics, "speculative_decoding": metrics.get("speculative_decoding")},
    }
