"""Faults and bad input: each gets a clear answer, and nothing hangs or crashes."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from loadgen.stack.processes import free_port
from tests.support.proxy import disconnect_mid_stream, read_raw

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}


def post(url: str, script: dict | None = None, body: object = BODY, **kw) -> httpx.Response:
    headers = {"x-script": json.dumps(script or {}), **kw.pop("headers", {})}
    return httpx.post(
        url + "/v1/chat/completions",
        json=body,
        headers=headers,
        timeout=kw.pop("timeout", 20),
        **kw,
    )


def test_upstream_refusing_connections_gives_fast_502(start_proxy) -> None:
    proxy = start_proxy("--upstream", f"http://127.0.0.1:{free_port()}")
    t = time.perf_counter()
    r = post(proxy.url)
    assert time.perf_counter() - t < 1.0
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "BadGateway"
    assert 'kind="connect"' in proxy.metrics()
    assert proxy.request_logs(r.headers["x-request-id"])[0]["outcome"] == "upstream_error"


def test_upstream_silent_before_headers_gives_504(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--read-timeout", "400ms")
    t = time.perf_counter()
    r = post(proxy.url, {"headers_delay": 3})
    assert 0.35 < time.perf_counter() - t < 1.5
    assert r.status_code == 504 and r.json()["error"]["type"] == "GatewayTimeout"
    log = proxy.request_logs(r.headers["x-request-id"])[0]
    assert log["outcome"] == "upstream_timeout"


def read_cut_stream(url: str, script: dict) -> tuple[bytes, str]:
    """A stream the proxy cut because its upstream broke: the events that came, and the
    request id. The connection closed without the body's last chunk, as the upstream's did,
    so the client's HTTP library says the body was cut."""
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json=BODY,
        timeout=10,
        headers={"x-script": json.dumps(script)},
    ) as r:
        raw, cut = read_raw(r)
    assert cut
    return raw, r.headers["x-request-id"]


def test_upstream_silent_mid_stream_cuts_the_stream(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--read-timeout", "400ms")
    t = time.perf_counter()
    raw, request_id = read_cut_stream(proxy.url, {"tokens": 5, "hang_after": 2})
    assert time.perf_counter() - t < 2.0
    assert raw.count(b'"content":"tok ') == 2
    log = proxy.request_logs(request_id)[0]
    assert (log["outcome"], log["status"]) == ("upstream_timeout", 200)


@pytest.mark.parametrize("status", [400, 404, 422, 500, 503])
def test_upstream_error_status_passes_through_unchanged(proxy, upstream, status: int) -> None:
    error = json.dumps({"object": "error", "message": "scripted failure", "code": status})
    script = {"status": status, "error_body": error}
    direct = post(upstream.url, script)
    r = post(proxy.url, script)
    assert r.status_code == status
    assert r.content == direct.content


def test_upstream_dying_mid_stream_cuts_the_client_stream(proxy) -> None:
    t = time.perf_counter()
    raw, request_id = read_cut_stream(proxy.url, {"tokens": 9, "itl": 0.01, "die_after": 3})
    assert time.perf_counter() - t < 2.0
    assert raw.count(b'"content":"tok ') == 3 and b"[DONE]" not in raw
    log = proxy.request_logs(request_id)[0]
    assert log["outcome"] == "upstream_error" and log["output_tokens"] == 3
    assert 'kind="protocol"' in proxy.metrics()


def test_client_disconnect_cancels_upstream_within_a_second(proxy, upstream) -> None:
    rid = "gone-" + uuid.uuid4().hex
    closed = disconnect_mid_stream(
        proxy.url,
        json.dumps(BODY).encode(),
        {"x-request-id": rid, "x-script": json.dumps({"tokens": 1000, "itl": 0.02})},
        b"tok ",
        3,
    )
    deadline = closed + 3
    while time.perf_counter() < deadline and not any(r == rid for r, _ in upstream.disconnects):
        time.sleep(0.02)
    seen = [t for r, t in upstream.disconnects if r == rid]
    assert seen and seen[0] - closed < 1.0
    assert proxy.request_logs(rid)[0]["outcome"] == "client_abort"


def test_malformed_json_is_forwarded_and_upstream_error_reaches_client(proxy) -> None:
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 400
    assert "JSON decode error" in r.json()["error"]["message"]  # vLLM's words for it


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'"string"',
        b'{"model": 5, "stream": "yes"}',
        b'{"stream": true, "stream_options": 3}',
        b"",
    ],
)
def test_odd_but_valid_json_never_crashes(proxy, body: bytes) -> None:
    r = httpx.post(proxy.url + "/v1/completions", content=body, timeout=10)
    assert r.status_code in (200, 400)
    assert "x-request-id" in r.headers


def test_oversized_body_gets_413(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--max-body-size", "1KiB")
    before = len(posts(upstream))
    r = post(proxy.url, body={"model": "m", "prompt": "x" * 2000})
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "RequestTooLarge"
    r = httpx.post(
        proxy.url + "/v1/completions", content=(b"x" * 600 for _ in range(3)), timeout=10
    )  # chunked, no content-length: counted while read
    assert r.status_code == 413
    assert len(posts(upstream)) == before
    assert 'outcome="rejected"' in proxy.metrics()


def posts(upstream) -> list:
    """What the upstream received but the proxy's own listings (GET /v1/models)."""
    return [r for r in upstream.received if r.method == "POST"]
