"""Nothing lost, nothing stuck: whatever the upstream sends and whatever the client asks, the
client gets its bytes and the request is recorded exactly once, with what was measured."""

from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from loadgen.stack.processes import free_port
from tests.support.canned_upstream import EVENT_STREAM, Answer, CannedUpstream
from tests.support.canned_upstream import serve as serve_canned

HUGE = 18446744073709551615  # 2**64 - 1: still an integer to orjson, past any int64
ODD_EVENTS = [
    b'{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}',
    b'{"choices": 1}',
    b"[1, 2]",
    b'"just a string"',
    b"3",
    b"null",
    b'{"choices":[{"index":0,"delta":{"content":"b"}}],'
    b'"usage":{"prompt_tokens":7,"completion_tokens":%d}}' % HUGE,
    b'{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":%d}}' % HUGE,
    b"[DONE]",
]


@pytest.fixture(scope="module")
def canned() -> Iterator[CannedUpstream]:
    with serve_canned() as app:
        yield app


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


@pytest.mark.parametrize("client_asks_usage", [True, False])
def test_odd_events_pass_and_the_request_is_recorded_once(
    start_proxy, canned, client_asks_usage: bool
) -> None:
    proxy = start_proxy("--upstream", canned.url)
    rid = "odd-" + uuid.uuid4().hex
    stream = sse(*ODD_EVENTS)
    canned.answers[rid] = Answer([stream[:40], stream[40:]])  # a read that splits an event
    body: dict = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    if client_asks_usage:
        body["stream_options"] = {"include_usage": True}
    r = httpx.post(
        proxy.url + "/v1/chat/completions", json=body, headers={"x-request-id": rid}, timeout=10
    )
    assert r.status_code == 200
    if client_asks_usage:
        assert r.content == stream
    else:  # the usage-only event the proxy asked for is dropped, nothing else
        assert r.content == sse(*ODD_EVENTS[:7], ODD_EVENTS[8])
    (line,) = proxy.request_logs(rid)
    assert (line["outcome"], line["chunks"], line["invalid_events"]) == ("ok", 2, 2)
    assert line["output_tokens"] == 2 and line["input_tokens"] == 7
    assert proxy.samples("latency_proxy_requests_active") == [0.0]
    output = proxy.output()
    assert "Task exception was never retrieved" not in output
    assert '"level":"error"' not in output


def test_a_body_too_deep_to_rewrite_goes_upstream_as_sent(proxy, upstream) -> None:
    schema: dict = {"type": "string"}
    for _ in range(260):  # orjson reads 1024 levels but writes 255
        schema = {"type": "object", "properties": {"x": schema}}
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": schema},
            },
        }
    ).encode()
    rid = "deep-" + uuid.uuid4().hex
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=body,
        headers={"x-request-id": rid, "content-type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 200 and r.content.count(b'"content":"tok ') == 5
    (received,) = [x for x in upstream.received if x.headers.get("x-request-id") == rid]
    assert received.body == body  # uninjected
    (line,) = proxy.request_logs(rid)
    assert (line["outcome"], line["output_tokens"]) == ("ok", 5)


def test_include_usage_is_read_as_vllm_reads_it(proxy, upstream) -> None:
    rid = "lax-" + uuid.uuid4().hex
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": "false"},  # vLLM's lax bool: false
        "messages": [{"role": "user", "content": "x"}],
    }
    r = httpx.post(
        proxy.url + "/v1/chat/completions", json=body, headers={"x-request-id": rid}, timeout=10
    )
    assert r.status_code == 200 and b'"usage"' not in r.content
    (received,) = [x for x in upstream.received if x.headers.get("x-request-id") == rid]
    assert json.loads(received.body)["stream_options"]["include_usage"] is True
    (line,) = proxy.request_logs(rid)
    assert (line["input_tokens"], line["output_tokens"]) == (7, 5)


def test_concurrency_limit_counts_model_calls_only(start_proxy, canned) -> None:
    proxy = start_proxy("--upstream", canned.url, "--max-concurrent-requests", "1")
    held = "held-" + uuid.uuid4().hex
    release = threading.Event()
    canned.answers[held] = Answer([b"ok"], [(b"content-type", b"text/plain")], hold=release)
    worker = threading.Thread(
        target=httpx.get,
        args=(proxy.url + "/tokenize",),
        kwargs={"headers": {"x-request-id": held}, "timeout": 30},
    )
    worker.start()
    try:
        for _ in range(100):  # the pass-through request is in flight
            if held in canned.arrived_ids():
                break
            time.sleep(0.05)
        rid = "call-" + uuid.uuid4().hex
        canned.answers[rid] = Answer([sse(ODD_EVENTS[0], b"[DONE]")])
        r = httpx.post(
            proxy.url + "/v1/completions",
            json={"model": "m", "prompt": "x", "stream": True},
            headers={"x-request-id": rid},
            timeout=10,
        )
        assert r.status_code == 200
    finally:
        release.set()
        worker.join(10)


def test_a_compressed_stream_passes_and_says_it_was_not_measured(start_proxy, canned) -> None:
    proxy = start_proxy("--upstream", canned.url)
    rid = "gzip-" + uuid.uuid4().hex
    stream = gzip.compress(sse(*ODD_EVENTS[:1], b"[DONE]"))
    canned.answers[rid] = Answer([stream], [*EVENT_STREAM, (b"content-encoding", b"gzip")])
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "m", "stream": True, "messages": []},
        headers={"x-request-id": rid},
        timeout=10,
    ) as r:
        assert b"".join(r.iter_raw()) == stream
    (line,) = proxy.request_logs(rid)
    assert (line["outcome"], line["not_measured"]) == ("ok", "content_encoding")
    assert "chunks" not in line and "ttft_s" not in line
    assert re.search(r'latency_proxy_requests_total\{[^}]*outcome="ok"\} 1', proxy.metrics())


def hold_a_stream(url: str, request_id: str, release: threading.Event) -> threading.Thread:
    """A streaming request that reads its first chunk, then holds its connection until
    `release` is set (the upstream is scripted to go silent after that chunk)."""

    def run() -> None:
        headers = {"x-request-id": request_id, "x-script": json.dumps({"hang_after": 1})}
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as r:
            chunks = r.iter_raw()  # kept: a dropped iterator closes the response
            next(chunks)
            release.wait(30)

    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_readiness_and_listings_never_queue_behind_streams(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream", upstream.url, "--pool-max-connections", "1", "--connect-timeout", "1s"
    )
    rid = "pool-" + uuid.uuid4().hex
    release = threading.Event()
    worker = hold_a_stream(proxy.url, rid, release)
    try:
        for _ in range(100):  # the one pooled connection is taken
            if any(x.headers.get("x-request-id") == rid for x in upstream.received):
                break
            time.sleep(0.05)
        t = time.perf_counter()
        ready = httpx.get(proxy.admin + "/readyz", timeout=10)
        assert time.perf_counter() - t < 1.0
        assert ready.status_code == 200 and ready.json()["upstreams"] == {"default": True}
        listed = httpx.get(proxy.url + "/v1/models", timeout=10).json()
        assert [m["id"] for m in listed["data"]] == ["scripted"]
        queued = "queued-" + uuid.uuid4().hex
        r = httpx.post(
            proxy.url + "/v1/completions",
            json={"model": "m", "prompt": "x"},
            headers={"x-request-id": queued},
            timeout=10,
        )
    finally:
        release.set()
        worker.join(10)
    # a wait for the proxy's own pool is its queue, not the upstream's timeout
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "ServiceUnavailable"
    (line,) = proxy.request_logs(queued)
    assert (line["outcome"], line["error_type"]) == ("rejected", "pool_timeout")
    assert "latency_proxy_upstream_errors_total{" not in proxy.metrics()


def test_ready_while_any_route_answers_and_the_body_lists_each(start_proxy, upstream) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    proxy = start_proxy("--upstream", f"live={upstream.url}", "--upstream", f"dead={dead}")
    ready = httpx.get(proxy.admin + "/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "upstreams": {"live": True, "dead": False}}
    proxy = start_proxy("--upstream", f"dead={dead}")
    ready = httpx.get(proxy.admin + "/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["upstreams"] == {"dead": False}


def test_a_client_that_stops_reading_is_let_go_at_the_write_timeout(start_proxy, canned) -> None:
    proxy = start_proxy("--upstream", canned.url, "--write-timeout", "1s")
    rid = "stalled-" + uuid.uuid4().hex
    event = sse(b'{"choices":[{"index":0,"delta":{"content":"%s"}}]}' % (b"x" * 65536))
    canned.answers[rid] = Answer([event] * 1000)  # 64 MiB: more than any socket buffers
    body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: %s\r\n"
            b"content-length: %d\r\n\r\n%s" % (rid.encode(), len(body), body)
        )
        client.recv(1024)  # the stream started; from here on nothing is read
        t = time.perf_counter()
        (line,) = proxy.request_logs(rid, timeout=10)
        assert time.perf_counter() - t < 5
        assert (line["outcome"], line["error_type"], line["status"]) == (
            "client_abort",
            "write_timeout",
            200,
        )
        assert line["level"] == "warning"
    assert proxy.samples("latency_proxy_requests_active") == [0.0]
    assert '"level":"error"' not in proxy.output()


def test_a_slow_reader_gets_every_byte_and_is_not_let_go(start_proxy, canned) -> None:
    """Backpressure: the client's full buffer pauses the upstream's reads until it drains
    (relay.Backpressure), so nothing is lost or held without bound; and a client that stops
    reading for less than the write timeout, twice, is not taken for one that stopped."""
    proxy = start_proxy("--upstream", canned.url, "--write-timeout", "1s")
    rid = "slow-" + uuid.uuid4().hex
    events = [
        sse(b'{"choices":[{"index":0,"delta":{"content":"%d%s"}}]}' % (i, b"y" * 65536))
        for i in range(128)
    ]  # 8 MiB: more than the socket buffers between proxy and client (4 MiB + 128 KiB)
    canned.answers[rid] = Answer([*events, b"data: [DONE]\n\n"])
    body = json.dumps(
        {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "messages": []}
    ).encode()
    received = bytearray()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no autotuning
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: %s\r\n"
            b"content-length: %d\r\n\r\n%s" % (rid.encode(), len(body), body)
        )
        client.settimeout(10)
        pauses = [0, 4 * 2**20]  # stop reading at the start and halfway
        while not received.endswith(b"\r\n0\r\n\r\n"):
            if pauses and len(received) >= pauses[0]:
                pauses.pop(0)
                time.sleep(0.6)  # the proxy's buffers fill: it stops reading upstream
            data = client.recv(65536)
            assert data, "the proxy closed the stream"
            received += data
    assert time.perf_counter() - start > 1.2  # longer than the write timeout, in all
    head, _, framed = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    content = _unchunked(framed)
    assert content == b"".join(events) + b"data: [DONE]\n\n"
    (line,) = proxy.request_logs(rid, timeout=10)
    assert (line["outcome"], line["bytes_out"]) == ("ok", len(content))


def _unchunked(framed: bytes) -> bytes:
    """A chunked body's content (no extensions, no trailers: what uvicorn writes)."""
    out, at = bytearray(), 0
    while True:
        end = framed.index(b"\r\n", at)
        size = int(framed[at:end], 16)
        if size == 0:
            return bytes(out)
        out += framed[end + 2 : end + 2 + size]
        at = end + 2 + size + 2


def test_names_the_upstream_lists_take_the_model_labels(start_proxy, upstream) -> None:
    """An upstream that answers 200 for any model name (the scripted one does) must not let
    the first clients' names become labels once it has listed its models."""
    proxy = start_proxy("--upstream", upstream.url)
    assert httpx.get(proxy.admin + "/readyz", timeout=10).status_code == 200  # learns the list
    with httpx.Client(timeout=10) as client:
        for i in range(40):
            assert (
                client.post(
                    proxy.url + "/v1/completions", json={"model": f"m{i}", "prompt": "x"}
                ).status_code
                == 200
            )
        client.post(proxy.url + "/v1/completions", json={"model": "scripted", "prompt": "x"})
    models = set(
        re.findall(
            r'latency_proxy_requests_total\{[^}]*gen_ai_request_model="([^"]+)"', proxy.metrics()
        )
    )
    assert models == {"other", "scripted"}
