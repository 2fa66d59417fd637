"""A scripted agent: a real client program that works the way agents use a model server.

Each session asks, runs a tool (a short sleep standing for it), sends back the answer and
the tool's result, and asks again; then fans out three calls in parallel over the same
history, follows one of them up, and (where it names its session) asks a sub-agent a
question that shares no prefix with the rest. It writes its own record of every call:
the id it sent as X-Request-ID, its session, and the call it continued.

Sessions differ in how they say who they are: `header` sends X-Session-ID on every call,
`trace` a W3C traceparent of one trace, `none` nothing (the prefix alone tells).

    python -m tests.support.agent URL OUT.jsonl [--canary WORD]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx

TOOL_S = 0.15  # how long a "tool" takes
WORDS = ["pump", "valve", "tank", "pipe", "gauge", "meter", "flow", "level", "pressure", "filter"]


def _text(label: str, words: int, canary: str) -> str:
    """A prompt's text: a canary word (which must never reach a log) and filler."""
    return f"{canary} {label} " + " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(words))


class Agent:
    def __init__(self, client: httpx.AsyncClient, model: str, canary: str) -> None:
        self.client = client
        self.model = model
        self.canary = canary
        self.calls: list[dict[str, Any]] = []

    async def call(
        self,
        session: str,
        kind: str,
        number: int,
        messages: list[dict[str, Any]],
        parent: str | None,
    ) -> tuple[str, str]:
        """One streamed call; returns its id and the answer's text as the client read it."""
        call_id = f"agent-{session}-{number}"
        headers = {"x-request-id": call_id}
        if kind == "header":
            headers["x-session-id"] = f"session-{session}"
        elif kind == "trace":
            trace = (int.from_bytes(session.encode(), "big") % (1 << 120)) | (1 << 124)
            headers["traceparent"] = f"00-{trace:032x}-{os.urandom(8).hex()}-01"
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": 24,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        sent = time.time()
        parts: list[str] = []
        async with self.client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices") or []:
                    parts.append((choice.get("delta") or {}).get("content") or "")
        self.calls.append(
            {
                "id": call_id,
                "session": session,
                "parent": parent,
                "sent": sent,
                "answered": time.time(),
            }
        )
        return call_id, "".join(parts)

    async def session(self, name: str, kind: str, turns: int) -> None:
        canary = self.canary
        history: list[dict[str, Any]] = [
            {"role": "system", "content": _text("you are a plant operator", 300, canary)},
            {"role": "user", "content": _text(f"task {name}", 40, canary)},
        ]
        parent, number = None, 0
        for turn in range(turns):  # a tool-calling loop
            number += 1
            parent, answer = await self.call(name, kind, number, history, parent)
            await asyncio.sleep(TOOL_S)
            # the answer as it came (the simulator asks for no tool by name), then the result
            result = _text("reading", 60, canary)
            history = [
                *history,
                {"role": "assistant", "content": answer},
                {"role": "tool", "tool_call_id": f"call_{name}_{turn}", "content": result},
            ]
        number += 1
        last_parent, answer = await self.call(name, kind, number, history, parent)
        base = [*history, {"role": "assistant", "content": answer}]
        branches = [
            [*base, {"role": "user", "content": _text(f"part {j}", 30, canary)}] for j in range(3)
        ]
        fanned = await asyncio.gather(
            *(self.call(name, kind, number + 1 + j, b, last_parent) for j, b in enumerate(branches))
        )
        number += 3
        first_id, first_answer = fanned[0]
        await asyncio.sleep(TOOL_S)
        follow = [
            *branches[0],
            {"role": "assistant", "content": first_answer},
            {"role": "user", "content": _text("sum up", 20, canary)},
        ]
        number += 1
        await self.call(name, kind, number, follow, first_id)
        if kind != "none":  # a sub-agent: no shared prefix, joined by what the session says
            number += 1
            fresh = [{"role": "user", "content": _text(f"look up {name}", 80, canary)}]
            await self.call(name, kind, number, fresh, None)


async def main(url: str, out: str, canary: str, model: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        agent = Agent(client, model, canary)
        await asyncio.gather(
            agent.session("a", "header", 3),
            agent.session("b", "trace", 2),
            agent.session("c", "none", 2),
        )
    with open(out, "w") as file:
        for call in agent.calls:
            file.write(json.dumps(call) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--canary", default="canary-agent")
    parser.add_argument("--model", default="sim")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.out, args.canary, args.model))
