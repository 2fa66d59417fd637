"""The streaming client: one request in, one Record out.

Every per-request figure comes from latency_proxy's SSEParser and StreamMeter, with t0 set
to the request's *intended* send time, so loadgen and the proxy share one definition of TTFT
and TPOT and a lagging client shows up as latency, not as a missing measurement.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from latency_proxy.meter import EventKind, StreamMeter
from latency_proxy.sse import SSEParser
from loadgen.records import FIRST_N, Record
from loadgen.targets import Target


@dataclass(slots=True)
class Clock:
    """perf_counter for durations, mapped to epoch seconds so shards' records line up."""

    perf0: float = field(default_factory=time.perf_counter)
    wall0: float = field(default_factory=time.time)

    def epoch(self, t: float) -> float:
        return self.wall0 + (t - self.perf0)


def session(connections: int = 0) -> aiohttp.ClientSession:
    """One pooled session per target; connections=0 is unbounded (open loop must not queue)."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, ttl_dns_cache=None)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def send(
    http: aiohttp.ClientSession,
    target: Target,
    path: str,
    body: dict[str, Any],
    intended: float,
    clock: Clock,
    timeout_s: float,
) -> Record:
    """Stream one request; never raises for server or transport failures (they are records)."""
    request_id = str(uuid.uuid4())
    trace_id = secrets.token_hex(16)
    headers = {
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",  # a compressed stream would arrive in bursts
        "X-Request-ID": request_id,
        # sampled W3C trace context: the proxy continues it and vLLM's llm_request joins it
        "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01",
        **target.headers,
    }
    payload = orjson.dumps(body)
    meter = StreamMeter(intended, first_n=(FIRST_N,))
    status: int | None = None
    error: str | None = None
    ended: bool | None = None  # a stream's [DONE] came (None: not a stream)
    sent = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with http.post(target.endpoint(path), data=payload, headers=headers) as resp:
                status = resp.status
                if status != 200:
                    await resp.read()  # drained, never recorded: it may quote the prompt
                    error = f"http_{status}"
                elif resp.content_type == "text/event-stream":
                    parser, ended = SSEParser(), False
                    async for chunk in resp.content.iter_any():
                        now = time.perf_counter()
                        for event in parser.feed(chunk):
                            ended = meter.on_event(now, event) is EventKind.DONE or ended
                else:
                    meter.on_body(await resp.read())
    except TimeoutError:
        error = "timeout"
    except aiohttp.ClientError as exc:
        error = type(exc).__name__
    end = time.perf_counter()
    timing = meter.finish(end)
    if error is None and timing.error_type is not None:
        error = f"stream_error:{timing.error_type}"
    if error is None and timing.output_tokens is None:
        error = "no_output"
    if error is None and ended is False:
        error = "truncated"  # the stream ended without its [DONE]: an upstream cut it
    return Record(
        request_id=request_id,
        target=target.name,
        intended_at=clock.epoch(intended),
        sent_at=clock.epoch(sent),
        end_at=clock.epoch(end),
        send_lag_s=sent - intended,
        ok=error is None,
        status=status,
        error=error,
        ttft_s=timing.ttft_s,
        tpot_s=timing.tpot_s,
        e2e_s=timing.e2e_s,
        time_to_first_chunk_s=timing.time_to_first_chunk_s,
        ttfnt_s={str(n): t for n, t in timing.ttfnt_s.items()},
        itl_s=timing.itl_s,
        coalesced_fraction=timing.coalesced_fraction,
        tokens_per_chunk=timing.tokens_per_chunk,
        input_tokens=timing.input_tokens,
        output_tokens=timing.output_tokens,
        token_source=timing.token_source.value,
        finish_reason=timing.finish_reasons[-1] if timing.finish_reasons else None,
        response_id=timing.response_id,
        trace_id=trace_id,
    )


async def count_tokens(
    http: aiohttp.ClientSession,
    target: Target,
    model: str,
    *,
    prompt: str | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> int | None:
    """The server's token count via vLLM's /tokenize, or None when it has none.

    A prompt counts as a completion's would (with BOS); messages as a chat request's would
    (chat template applied, with the assistant's generation prompt).
    """
    body: dict[str, Any] = {"model": model}
    if messages is not None:
        body |= {"messages": messages, "add_generation_prompt": True}
    else:
        body["prompt"] = prompt
    try:
        async with asyncio.timeout(10):
            async with http.post(
                target.endpoint("/tokenize"), json=body, headers=target.headers
            ) as resp:
                if resp.status != 200:
                    return None
                data = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None
    count = data.get("count") if isinstance(data, dict) else None
    return count if isinstance(count, int) else None


async def first_model(http: aiohttp.ClientSession, target: Target) -> str | None:
    """The first model the target lists at /v1/models, for runs without --model."""
    try:
        async with asyncio.timeout(10):
            async with http.get(target.endpoint("/v1/models"), headers=target.headers) as resp:
                if resp.status != 200:
                    return None
                data = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None
    models = data.get("data") if isinstance(data, dict) else None
    if models and isinstance(models[0], dict):
        return models[0].get("id")
    return None
