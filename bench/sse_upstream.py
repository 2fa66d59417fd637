"""A minimal, fast OpenAI-style SSE chat upstream for benchmarks.

Every POST streams: a role chunk at once, the first content chunk `--ttft` after the request,
then one content chunk every `--itl`, a finish chunk, a usage chunk when the request asks for
`stream_options.include_usage`, and `[DONE]`. Each chunk is sent at its scheduled time measured
from the request's arrival, so timer jitter never accumulates. A POST with `"stream": false`
gets one chat.completion JSON body (its tokens' worth of text, usage) `--ttft` after it
arrived: the classifier/embedding shape. GET answers a one-model list.

It is a raw asyncio protocol (httptools + uvloop, pre-built chunk bytes, one timer callback per
event) so that the upstream is not what a proxy benchmark measures: 13-17 µs of CPU per event,
where `python -m loadgen.sim --ttft --itl` (the tests' scripted upstream) spends 37 µs (64
streams of 200 tokens at 5 ms ITL, 2-core box) — on two cores the difference is the proxy's.

    python bench/sse_upstream.py --port 8000 [--ttft 50ms] [--itl 10ms]
"""

from __future__ import annotations

import argparse
import asyncio

import httptools
import orjson
import uvloop
from servers import add_address_flags, serve  # bench/, beside this script

from latency_proxy.base.units import parse_duration

MODEL = "bench"
DEFAULT_TOKENS = 64
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
_MODELS_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_MODELS), _MODELS)
)


def _frame(payload: dict | bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _chunk(delta: dict, finish_reason: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return _frame(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [choice],
        }
    )


ROLE = _chunk({"role": "assistant", "content": ""})
TOKEN = _chunk({"content": " tok"})
FINISH = _chunk({}, "length")
DONE_FRAMES = _frame(b"[DONE]") + b"0\r\n\r\n"


def _usage_object(tokens: int) -> dict:
    return {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}


def _completion(tokens: int) -> bytes:
    """A whole non-streaming answer, head and body."""
    body = orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": " tok" * tokens},
                    "finish_reason": "length",
                }
            ],
            "usage": _usage_object(tokens),
        }
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


def _usage(tokens: int) -> bytes:
    usage = _usage_object(tokens)
    return _frame(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [],
            "usage": usage,
        }
    )


class StreamProtocol(asyncio.Protocol):
    """One connection; keep-alive, one request at a time (nobody pipelines POSTs)."""

    def __init__(self, ttft: float, itl: float) -> None:
        self.ttft = ttft
        self.itl = itl
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            self.transport.close()

    # httptools callbacks

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_method() != b"POST":
            self.transport.write(_MODELS_RESPONSE)
            return
        try:
            request = orjson.loads(b"".join(self.body))
        except orjson.JSONDecodeError:
            request = {}
        tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)
        if request.get("stream") is False:
            answer = _completion(tokens or DEFAULT_TOKENS)
            self.timer = self.loop.call_later(self.ttft, self._answer, answer)
            return
        options = request.get("stream_options") or {}
        self.transport.write(_HEAD + ROLE)
        self._schedule(
            self.loop.time() + self.ttft,
            0,
            tokens or DEFAULT_TOKENS,
            bool(options.get("include_usage")),
        )

    def _answer(self, answer: bytes) -> None:
        self.timer = None
        if not self.transport.is_closing():
            self.transport.write(answer)
            if not self.parser.should_keep_alive():
                self.transport.close()

    # the stream

    def _schedule(self, due: float, sent: int, tokens: int, usage: bool) -> None:
        self.timer = self.loop.call_at(due, self._send, due, sent, tokens, usage)

    def _send(self, due: float, sent: int, tokens: int, usage: bool) -> None:
        if self.transport.is_closing():
            return
        sent += 1
        if sent < tokens:
            self.transport.write(TOKEN)
            self._schedule(due + self.itl, sent, tokens, usage)
            return
        self.timer = None
        self.transport.write(TOKEN + FINISH + (_usage(tokens) if usage else b"") + DONE_FRAMES)
        if not self.parser.should_keep_alive():
            self.transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_address_flags(parser, port=8000)
    parser.add_argument("--ttft", type=parse_duration, default=0.05)
    parser.add_argument("--itl", type=parse_duration, default=0.01)
    args = parser.parse_args()
    uvloop.run(serve(lambda: StreamProtocol(args.ttft, args.itl), args.host, args.port))


if __name__ == "__main__":
    main()
