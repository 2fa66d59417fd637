"""ProxyApp without uvicorn's protocol: in-process through httpx's ASGI transport, the
relay falls back to plain ASGI sends (writers.AsgiWriter) and still passes the stream
through byte for byte, with its one record."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from latency_proxy.base.config import load_settings
from latency_proxy.process.app import ProxyApp
from latency_proxy.server.writers import AsgiWriter


@asynccontextmanager
async def lifespan(app: ProxyApp) -> AsyncIterator[None]:
    """Run the app's lifespan as an ASGI server would (httpx's transport does not)."""
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    outbox: asyncio.Queue[dict] = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task


async def _stream_through(url: str, script: dict) -> tuple[int, dict, bytes]:
    app = ProxyApp(load_settings({"upstream": [url]}, environ={}))
    async with lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://proxy") as client,
            client.stream(
                "POST",
                "/v1/chat/completions",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
                headers={"x-script": json.dumps(script), "x-request-id": "in-process-1"},
            ) as r,
        ):
            body = b"".join([part async for part in r.aiter_raw()])
            return r.status_code, dict(r.headers), body


def _unclocked(stream: bytes) -> bytes:
    return re.sub(rb'"created":\d+', b'"created":0', stream)


def test_a_stream_through_proxyapp_in_process(upstream, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="latency_proxy.access")
    script = {"tokens": 6, "itl": 0.01}
    status, headers, body = asyncio.run(_stream_through(upstream.url, script))
    direct = httpx.post(
        upstream.url + "/v1/chat/completions",
        json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-script": json.dumps(script), "x-request-id": "in-process-1"},
        timeout=10,
    ).content
    assert status == 200 and headers["x-request-id"] == "in-process-1"
    assert headers["content-type"].startswith("text/event-stream")
    # byte for byte what the upstream sends this request, its clock aside (and without
    # the usage event the proxy asked for itself)
    assert _unclocked(body) == _unclocked(direct) and body.endswith(b"data: [DONE]\n\n")
    records = [r for r in caplog.records if r.name == "latency_proxy.access"]
    assert len(records) == 1
    fields = records[0].fields
    assert fields["outcome"] == "ok" and fields["status"] == 200
    assert fields["bytes_out"] == len(body) and fields["output_tokens"] == 6
    assert fields["ttft_s"] is not None and fields["chunks"] >= 6


def test_the_asgi_writer_reports_a_full_buffer_until_it_is_sent() -> None:
    async def run() -> tuple[list[bytes], list[bool], int]:
        sent: list[bytes] = []
        release = asyncio.Event()

        async def slow_send(message: dict) -> None:  # a client that reads when told to
            await release.wait()
            sent.append(message["body"])

        writer = AsgiWriter(slow_send)
        woken = 0

        def writable() -> None:
            nonlocal woken
            woken += 1

        writer.on_writable = writable
        full = [writer.write(b"a" * 40_000), writer.write(b"b" * 40_000)]
        await asyncio.sleep(0)
        full.append(writer.write(b"c"))  # the first send took the 80 kB: waiting again is 1 B
        release.set()
        await writer.drain()
        return sent, full, woken

    sent, full, woken = asyncio.run(run())
    assert full == [False, True, False]
    assert b"".join(sent) == b"a" * 40_000 + b"b" * 40_000 + b"c"
    assert woken >= 1  # the relay was told it may read the upstream again
