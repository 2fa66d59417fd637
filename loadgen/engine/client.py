"""The streaming client: one request in, one Record out.

Every per-request figure comes from latency_proxy's SSEParser and StreamMeter (through
measurement.py, which the Locust engine shares), with t0 set to the request's *intended*
send time, so loadgen and the proxy share one definition of TTFT and TPOT and a lagging
client shows up as latency, not as a missing measurement.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from latency_proxy.measure.meter import STALL_THRESHOLD_S
from loadgen.analysis.records import UNFINISHED, Record
from loadgen.engine.measurement import Clock, Measurement
from loadgen.engine.targets import Target

# An idle connection is dropped before the server would: vLLM's uvicorn (and the proxy's)
# closes idle connections after 5 s, and a request sent as that close crosses it is lost
# (aiohttp's 15 s default lost 7 of 19,365 requests of an hour's replay that way).
KEEPALIVE_S = 4.0


class Cutoff:
    """Lets the runner end one request in flight early (its window's drain ended): the
    request stops where it is and its record says UNFINISHED, instead of timing out."""

    __slots__ = ("_scope", "cut")

    def __init__(self) -> None:
        self.cut = False
        self._scope: asyncio.Timeout | None = None

    def now(self) -> None:
        self.cut = True
        if self._scope is not None and not self._scope.expired():
            self._scope.reschedule(asyncio.get_running_loop().time())

    def watch(self, scope: asyncio.Timeout) -> None:
        """The request's timeout scope; one cut before the request started ends it at once."""
        self._scope = scope
        if self.cut:
            self.now()


def session(connections: int = 0) -> aiohttp.ClientSession:
    """One pooled session per target; connections=0 is unbounded (open loop must not queue)."""
    connector = aiohttp.TCPConnector(
        limit=connections, limit_per_host=0, ttl_dns_cache=None, keepalive_timeout=KEEPALIVE_S
    )
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def send(
    http: aiohttp.ClientSession,
    target: Target,
    path: str,
    body: dict[str, Any],
    intended: float,
    clock: Clock,
    timeout_s: float,
    answer: list[str] | None = None,
    stall_threshold_s: float = STALL_THRESHOLD_S,
    cutoff: Cutoff | None = None,
) -> Record:
    """Stream one request; never raises for server or transport failures (they are records).
    With `answer`, the answer's text is appended to it (for a conversation's next turn);
    with `cutoff`, the caller may end it early."""
    m = Measurement(
        target, intended, collect_text=answer is not None, stall_threshold_s=stall_threshold_s
    )
    payload = orjson.dumps(body)
    m.sent = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s) as scope:
            if cutoff is not None:
                cutoff.watch(scope)
            async with http.post(target.endpoint(path), data=payload, headers=m.headers()) as resp:
                m.status = resp.status
                if resp.status != 200:
                    await resp.read()  # drained, never recorded: it may quote the prompt
                    m.error = f"http_{resp.status}"
                elif resp.content_type == "text/event-stream":
                    m.streaming()
                    async for chunk in resp.content.iter_any():
                        m.feed(time.perf_counter(), chunk)
                else:
                    m.body(await resp.read())
    except TimeoutError:
        m.error = UNFINISHED if cutoff is not None and cutoff.cut else "timeout"
    except aiohttp.ClientError as exc:
        m.error = type(exc).__name__
    record = m.record(time.perf_counter(), clock)
    if answer is not None:
        answer.append(m.answer or "")
    return record


async def count_tokens(
    http: aiohttp.ClientSession,
    target: Target,
    model: str,
    *,
    prompt: str | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> int | None:
    """The server's token count via vLLM's /tokenize, or None when it has none."""
    body = tokenize_body(model, prompt=prompt, messages=messages)
    return token_count(await _answer(http, "POST", target.endpoint("/tokenize"), target, body))


async def _answer(
    http: aiohttp.ClientSession, method: str, url: str, target: Target, body: Any = None
) -> Any:
    """The JSON of a 200 answer within 10 s; None for anything else (a setup question a
    server need not answer: the run then does without)."""
    try:
        async with asyncio.timeout(10):
            async with http.request(method, url, json=body, headers=target.headers) as resp:
                if resp.status != 200:
                    return None
                return await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None


async def _model_cards(http: aiohttp.ClientSession, target: Target) -> Any:
    """The target's /v1/models answer, or None."""
    return await _answer(http, "GET", target.endpoint("/v1/models"), target)


async def first_model(http: aiohttp.ClientSession, target: Target) -> str | None:
    """The first model the target lists at /v1/models, for runs without --model."""
    return first_model_id(await _model_cards(http, target))


async def context_length(http: aiohttp.ClientSession, target: Target, model: str) -> int | None:
    """The model's context length as the target's /v1/models reports it (vLLM's
    max_model_len), or None when it does not say."""
    return context_limit(await _model_cards(http, target), model)


def tokenize_body(
    model: str, *, prompt: str | None = None, messages: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A /tokenize request: a prompt counts as a completion's would (with BOS); messages as
    a chat request's would (chat template applied, with the assistant's generation prompt)."""
    body: dict[str, Any] = {"model": model}
    if messages is not None:
        body |= {"messages": messages, "add_generation_prompt": True}
    else:
        body["prompt"] = prompt
    return body


def token_count(data: Any) -> int | None:
    """The count in a /tokenize answer, or None."""
    count = data.get("count") if isinstance(data, dict) else None
    return count if isinstance(count, int) else None


def context_limit(data: Any, model: str) -> int | None:
    """A model's max_model_len in a /v1/models answer, or None."""
    models = data.get("data") if isinstance(data, dict) else None
    for card in models if isinstance(models, list) else []:
        if isinstance(card, dict) and card.get("id") == model:
            limit = card.get("max_model_len")
            return limit if type(limit) is int and limit > 0 else None
    return None


def first_model_id(data: Any) -> str | None:
    """The first model id in a /v1/models answer, or None."""
    models = data.get("data") if isinstance(data, dict) else None
    if models and isinstance(models[0], dict):
        return models[0].get("id")
    return None
