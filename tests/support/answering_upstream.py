"""A model that answers the built-in canaries right for a known share of them.

Each prompt is decided once, from a seeded hash (greedy: the same prompt, the same answer):
right with probability `share`, else off by one (a sum or product one too high, a string one
character short). `expected_correct` recomputes those decisions, so a test knows exactly how
many of the items it sent were answered right. Anything else it answers with a fixed
sentence. It streams OpenAI chat chunks, one word each, then usage and [DONE].
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson

from loadgen.analysis.evals import EvalItem
from loadgen.stack.processes import free_port
from tests.support.canned_upstream import lifespan
from tests.support.scripted_upstream import ServerThread

_SUM = re.compile(r"Compute (\d+) ([+*]) (\d+)\.")
_COPY = re.compile(r"with nothing else: (\S+)")
EVENT_STREAM = [(b"content-type", b"text/event-stream")]
JSON = [(b"content-type", b"application/json")]


def right(seed: int, share: float, prompt: str) -> bool:
    draw = int.from_bytes(hashlib.sha256(f"{seed}:{prompt}".encode()).digest()[:8])
    return draw / 2**64 < share


def answer(seed: int, share: float, prompt: str) -> str:
    ok = right(seed, share, prompt)
    if m := _SUM.search(prompt):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        result = a + b if op == "+" else a * b
        return f"The result is {result if ok else result + 1}"
    if m := _COPY.search(prompt):
        return m.group(1) if ok else m.group(1)[:-1]
    return "a fixed answer to anything else"


@dataclass
class AnsweringUpstream:
    seed: int
    share: float
    url: str = ""

    def expected_correct(self, items: Iterable[EvalItem]) -> int:
        return sum(right(self.seed, self.share, item.messages[-1]["content"]) for item in items)

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if scope["path"] == "/v1/models":
            await _whole(send, 200, {"object": "list", "data": [{"id": "answerer"}]})
            return
        if scope["path"] != "/v1/chat/completions":
            await _whole(send, 404, {"error": {"message": "not found"}})
            return
        request = orjson.loads(body)
        prompt = request["messages"][-1]["content"]
        words = answer(self.seed, self.share, prompt).split(" ")
        await send({"type": "http.response.start", "status": 200, "headers": EVENT_STREAM})
        for i, word in enumerate(words):
            delta = {"content": word if i == 0 else " " + word}
            await _event(send, {"id": "a", "object": "chat.completion.chunk", "model": "answerer",
                                "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        await _event(send, {"id": "a", "object": "chat.completion.chunk", "model": "answerer",
                            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        await _event(send, {"id": "a", "object": "chat.completion.chunk", "model": "answerer",
                            "choices": [], "usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _event(send, payload: dict) -> None:
    chunk = b"data: " + orjson.dumps(payload) + b"\n\n"
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _whole(send, status: int, payload: dict) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON})
    await send({"type": "http.response.body", "body": orjson.dumps(payload)})


@contextlib.contextmanager
def serve(seed: int, share: float) -> Iterator[AnsweringUpstream]:
    app = AnsweringUpstream(seed, share)
    port = free_port()
    with ServerThread(app, port):
        app.url = f"http://127.0.0.1:{port}"
        yield app
