"""A scripted OpenAI-style SSE upstream with exactly known timing, for loadgen's tests and bench.

Run as a separate process (so the client under test has the machine's other core):
    python tests/loadgen_upstream.py --ttft 0.2 --itl 0.02 [--port 0]
It prints `PORT <n>` once listening. Each streaming request gets a role-only chunk at once,
its first content token exactly `ttft` after arrival, then one token every `itl` (scheduled
on absolute times, so no drift), the usage chunk when asked, and [DONE].

POST /control with JSON changes the script for later requests:
  {"ttft": s, "itl": s}                       timing
  {"stall_at": n, "stall_s": s}               the n-th request (from 1) freezes the whole server
  {"fail_every": k, "fail_status": 500}       every k-th request fails with that status
  {"count_prompts": true}                     usage counts the prompt as /tokenize does
                                              (otherwise prompt_tokens is always 7)
GET /arrivals lists requests as they arrived ({"at": epoch seconds, "id": X-Request-ID});
POST /tokenize counts like a small tokenizer with a chat template (see `prompt_tokens`);
/health answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import uvloop
from aiohttp import web


def prompt_tokens(body: dict) -> int:
    """A word of up to four letters is one token, a longer one two; a prompt has a BOS token;
    a chat message costs three more for its role header, the generation prompt two."""

    def text(value: str) -> int:
        return sum(1 if len(word) <= 4 else 2 for word in value.split())

    if "messages" in body:
        content = sum(3 + text(m["content"]) for m in body["messages"])
        return content + (2 if body.get("add_generation_prompt", True) else 0)
    return 1 + text(body["prompt"])


def chunk(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class Upstream:
    def __init__(self, ttft: float, itl: float) -> None:
        self.script: dict = {"ttft": ttft, "itl": itl}
        self.arrivals: list[dict] = []

    async def control(self, request: web.Request) -> web.Response:
        self.script.update(await request.json())
        return web.json_response(self.script)

    async def get_arrivals(self, request: web.Request) -> web.Response:
        return web.json_response(self.arrivals)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"count": prompt_tokens(body)})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted"}]})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        self.arrivals.append({"at": time.time(), "id": request.headers.get("X-Request-ID")})
        number = len(self.arrivals)
        script = dict(self.script)
        body = await request.json()
        if number == script.get("stall_at"):
            time.sleep(script.get("stall_s", 1.0))  # freezes the whole server, on purpose
        fail_every = script.get("fail_every")
        if fail_every and number % fail_every == 0:
            status = script.get("fail_status", 500)
            return web.json_response({"error": {"type": "scripted"}}, status=status)
        chat = request.path.endswith("/chat/completions")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        # the client may go away (loadgen cancels cooldown requests): nothing to do then
        with contextlib.suppress(ConnectionResetError):
            await self._stream(response, body, number, start, script, chat)
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        body: dict,
        number: int,
        start: float,
        script: dict,
        chat: bool,
    ) -> None:
        tokens = int(body.get("max_tokens", 16))
        base = {"id": f"req-{number}", "model": body.get("model", "scripted")}
        if chat:
            await response.write(chunk({**base, "choices": [{"index": 0, "delta": {"role": "a"}}]}))
        for i in range(tokens):
            due = start + script["ttft"] + i * script["itl"]
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            piece = {"content": "tok"} if chat else None
            choice = {"index": 0, "delta": piece} if chat else {"index": 0, "text": "tok"}
            if i == tokens - 1:
                choice["finish_reason"] = "length"
            await response.write(chunk({**base, "choices": [choice]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt = prompt_tokens(body) if script.get("count_prompts") else 7
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": tokens,
                "total_tokens": tokens + prompt,
            }
            await response.write(chunk({**base, "choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()


async def serve(host: str, port: int, ttft: float, itl: float) -> None:
    upstream = Upstream(ttft, itl)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.complete)
    app.router.add_post("/v1/completions", upstream.complete)
    app.router.add_post("/control", upstream.control)
    app.router.add_post("/tokenize", upstream.tokenize)
    app.router.add_get("/arrivals", upstream.get_arrivals)
    app.router.add_get("/health", upstream.health)
    app.router.add_get("/v1/models", upstream.models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    await asyncio.Event().wait()


@contextlib.contextmanager
def running(ttft: float = 0.1, itl: float = 0.01) -> Iterator[str]:
    """Start the upstream as a child process; yield its base URL; always stop it."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--ttft", str(ttft), "--itl", str(itl)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"upstream did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def control(url: str, **script: float) -> None:
    """Change the running upstream's script (see the module docstring)."""
    request = urllib.request.Request(
        url + "/control", data=json.dumps(script).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def arrivals(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/arrivals", timeout=5) as resp:
        return json.loads(resp.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft", type=float, default=0.1)
    parser.add_argument("--itl", type=float, default=0.01)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port, args.ttft, args.itl))


if __name__ == "__main__":
    main()
