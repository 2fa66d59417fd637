"""Upstreams that break HTTP or stretch it (tests/support/raw_upstream.py): every failure
ends the exchange promptly, visibly to the client, with the right outcome, exactly once."""

from __future__ import annotations

import re
import time

import httpx
import orjson
import pytest

from latency_proxy.measure.sse import BOM
from tests.support.proxy import read_raw
from tests.support.raw_upstream import RawRequest, RawUpstream, Reply, response

CHUNKED_SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
CONTENT = {"index": 0, "delta": {"content": "hi"}}
EVENT = b"data: " + orjson.dumps(
    {"id": "c", "object": "chat.completion.chunk", "choices": [CONTENT]}
)
EVENT += b"\n\n"
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_invalid_chunked_framing_mid_stream_cuts_the_stream(start_proxy) -> None:
    def respond(request: RawRequest) -> Reply:
        # one valid chunk, then a chunk size that is not hex; the connection stays open
        return Reply(CHUNKED_SSE + chunk(EVENT), later=(b"zz\r\n" + EVENT + b"\r\n",))

    with RawUpstream(respond) as upstream:
        proxy = start_proxy("--upstream", upstream.url)  # --read-timeout 300s: not what ends it
        t = time.perf_counter()
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
            raw, cut = read_raw(r)
        assert time.perf_counter() - t < 2.0
    assert r.status_code == 200 and raw == EVENT and cut
    (line,) = proxy.request_logs(r.headers["x-request-id"])
    assert (line["outcome"], line["output_tokens"]) == ("upstream_error", 1)
    assert 'kind="protocol"' in proxy.metrics()


@pytest.mark.parametrize("then", ["close", "stall"])
def test_a_body_shorter_than_its_content_length_is_cut_short_for_the_client(
    start_proxy, then: str
) -> None:
    full = orjson.dumps({"id": "c", "object": "text_completion", "choices": [{"text": "x" * 80}]})
    head = response(full, b"content-type: application/json")
    sent = head[: len(head) - len(full) // 2]  # the head, and half the body it declares

    def respond(request: RawRequest) -> Reply:
        return Reply(sent, close=then == "close")

    with RawUpstream(respond) as upstream:
        proxy = start_proxy("--upstream", upstream.url, "--read-timeout", "500ms")
        rid = f"short-{then}"
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream(
                "POST",
                proxy.url + "/v1/completions",
                json={"model": "m", "prompt": "x"},
                headers={"x-request-id": rid},
                timeout=10,
            ) as r,
        ):
            assert r.status_code == 200
            r.read()  # the body ends without its last chunk: the client knows it is short
    (line,) = proxy.request_logs(rid)
    outcome, kind = {
        "close": ("upstream_error", "protocol"),
        "stall": ("upstream_timeout", "timeout"),
    }[then]
    assert line["outcome"] == outcome
    assert f'kind="{kind}"' in proxy.metrics()


def post_tokenize(url: str, body: bytes) -> httpx.Response:
    return httpx.post(url + "/tokenize", content=body, timeout=10)


def closed_after_reading_the_second_request(request: RawRequest) -> Reply:
    """A connection's first request is answered; the next is read whole, then the upstream
    closes without answering (it may have acted on it)."""
    return Reply(response(b"ok")) if request.index == 0 else Reply(close=True)


def test_a_post_the_upstream_read_and_dropped_is_not_sent_again(start_proxy) -> None:
    with RawUpstream(closed_after_reading_the_second_request) as upstream:
        proxy = start_proxy("--upstream", upstream.url)
        assert post_tokenize(proxy.url, b"first").status_code == 200
        r = post_tokenize(proxy.url, b"second")
        assert (r.status_code, r.json()["error"]["type"]) == (502, "BadGateway")
        seen = [(q.connection, q.index, q.body) for q in upstream.requests]
    assert seen == [(0, 0, b"first"), (0, 1, b"second")]  # run once, never twice
    (line,) = proxy.request_logs(r.headers["x-request-id"])
    assert (line["outcome"], line["error_type"]) == ("upstream_error", "protocol")
    counted = r'_not_retried_total\{[^}]*http_request_method="POST"[^}]*\} 1\.0'
    assert re.search(counted, proxy.metrics())


def test_a_get_the_upstream_read_and_dropped_is_sent_again_on_a_fresh_connection(
    start_proxy,
) -> None:
    with RawUpstream(closed_after_reading_the_second_request) as upstream:
        proxy = start_proxy("--upstream", upstream.url)
        assert httpx.get(proxy.url + "/first", timeout=10).status_code == 200
        r = httpx.get(proxy.url + "/second", timeout=10)
        assert (r.status_code, r.content) == (200, b"ok")
        seen = [(q.connection, q.index, q.target) for q in upstream.requests]
    assert seen == [(0, 0, b"/first"), (0, 1, b"/second"), (1, 0, b"/second")]
    assert "latency_proxy_upstream_not_retried_total{" not in proxy.metrics()


def test_a_post_that_fails_on_a_fresh_connection_is_not_sent_again(start_proxy) -> None:
    with RawUpstream(lambda request: Reply(close=True)) as upstream:
        proxy = start_proxy("--upstream", upstream.url)
        r = post_tokenize(proxy.url, b"once")
        assert r.status_code == 502 and r.json()["error"]["type"] == "BadGateway"
        assert [q.body for q in upstream.requests] == [b"once"]


def test_a_connection_the_upstream_marked_close_is_never_reused(start_proxy) -> None:
    # the upstream says close and then keeps the connection open (and would answer on it)
    with RawUpstream(lambda request: Reply(response(b"ok", b"connection: close"))) as upstream:
        proxy = start_proxy("--upstream", upstream.url)
        for body in (b"one", b"two", b"three"):
            assert post_tokenize(proxy.url, body).status_code == 200
        assert [(q.connection, q.index) for q in upstream.requests] == [(0, 0), (1, 0), (2, 0)]


def sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def test_an_event_past_max_event_bytes_passes_through_unmetered(start_proxy) -> None:
    def delta(text: str, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}

    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    big = [b"data: " + b"a" * 2**20] * 50 + [b"\n\n"]  # a 50 MB event, no newline until its end
    before, after = [sse(delta("hi"))], [sse(delta("!", "length")), b"data: [DONE]\n\n"]
    injected = sse({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    parts = [*before, *big, after[0], injected, after[1]]

    def respond(request: RawRequest) -> Reply:
        return Reply(CHUNKED_SSE, later=(*map(chunk, parts), b"0\r\n\r\n"), gap=0)

    with RawUpstream(respond) as upstream:
        proxy = start_proxy("--upstream", upstream.url, "--max-event-bytes", "1MiB")
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=BODY, timeout=30) as r:
            raw = b"".join(r.iter_raw())
        sent = orjson.loads(upstream.requests[0].body)
    assert sent["stream_options"] == {"include_usage": True}  # the proxy asked, the client did not
    assert raw == b"".join([*before, *big, *after])  # byte for byte, less the usage it asked for
    (line,) = proxy.request_logs(r.headers["x-request-id"])
    assert (line["outcome"], line["output_tokens"], line["input_tokens"]) == ("ok", 2, 3)
    assert re.search(r"latency_proxy_oversized_events_total\{[^}]*\} 1\.0", proxy.metrics())


def test_a_stream_that_starts_with_a_byte_order_mark_is_measured_and_unchanged(
    start_proxy,
) -> None:
    """WHATWG event-stream: one leading U+FEFF is ignored by a reader; the client still gets it."""
    parts = [BOM[:2], BOM[2:] + EVENT, EVENT, b"data: [DONE]\n\n"]

    def respond(request: RawRequest) -> Reply:
        return Reply(CHUNKED_SSE, later=(*map(chunk, parts), b"0\r\n\r\n"), gap=0.01)

    with RawUpstream(respond) as upstream:
        proxy = start_proxy("--upstream", upstream.url)
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
            raw = b"".join(r.iter_raw())
    assert raw == b"".join(parts)
    (line,) = proxy.request_logs(r.headers["x-request-id"])
    assert (line["outcome"], line["chunks"]) == ("ok", 2)
    assert line["ttft_s"] is not None and line["tpot_s"] is not None
