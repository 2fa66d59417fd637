"""Pass-through: bytes, headers, identity, routing — the client sees what it would directly."""

from __future__ import annotations

import json
import unicodedata
import uuid

import httpx
import pytest

from latency_proxy.measure.sse import SSEParser
from tests.support.scripted_upstream import MODEL

FAST = json.dumps({"tokens": 6, "itl": 0.005})


def stream_bytes(url: str, body: dict, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as response:
        return response, b"".join(response.iter_raw())


def events(raw: bytes) -> list[bytes]:
    return [e.raw for e in SSEParser().feed(raw)]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_stream_with_usage_asked_is_byte_identical(proxy, upstream, path: str) -> None:
    rid = "same-" + uuid.uuid4().hex
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
        "prompt": "hi",
    }
    headers = {"x-request-id": rid, "x-script": FAST}
    _, direct = stream_bytes(upstream.url + path, body, headers)
    response, proxied = stream_bytes(proxy.url + path, body, headers)
    assert proxied == direct
    assert response.headers["x-request-id"] == rid
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["x-upstream-unknown"] == "kept"
    assert response.headers["content-type"].startswith("text/event-stream")


@pytest.mark.parametrize("stream", [True, "yes", "On", 1])  # vLLM reads all as true
def test_injected_usage_is_stripped_events_identical(proxy, upstream, stream) -> None:
    rid = "inj-" + uuid.uuid4().hex
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-request-id": rid, "x-script": FAST}
    _, direct = stream_bytes(upstream.url + "/v1/chat/completions", body, headers)
    _, proxied = stream_bytes(proxy.url + "/v1/chat/completions", body, headers)
    # byte for byte, including the key vLLM moves onto the usage chunk when asked for usage
    assert proxied == direct
    fingerprint = b'"system_fingerprint":"%s"}' % upstream.fingerprint.encode()
    assert b'"usage"' not in proxied and fingerprint in proxied
    sent = [r for r in upstream.received if r.headers.get("x-request-id") == rid][-1]
    assert json.loads(sent.body)["stream_options"] == {"include_usage": True}
    log = proxy.request_logs(rid)[0]
    assert log["output_tokens"] == 6 and log["input_tokens"] == 7


def test_continuous_usage_asked_by_client_passes_through(proxy, upstream) -> None:
    rid = "cont-" + uuid.uuid4().hex
    body = {
        "model": "m",
        "stream": True,
        "prompt": "x",
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    headers = {"x-request-id": rid, "x-script": json.dumps({"tokens": 8, "per_chunk": 4})}
    _, direct = stream_bytes(upstream.url + "/v1/completions", body, headers)
    _, proxied = stream_bytes(proxy.url + "/v1/completions", body, headers)
    assert proxied == direct
    assert proxy.request_logs(rid)[0]["chunks"] == 2


def test_continuous_usage_configured_is_stripped_for_the_client(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--continuous-usage")
    rid = "cfg-" + uuid.uuid4().hex
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    headers = {"x-request-id": rid, "x-script": json.dumps({"tokens": 9, "per_chunk": 3})}
    _, direct = stream_bytes(upstream.url + "/v1/chat/completions", body, headers)
    _, proxied = stream_bytes(proxy.url + "/v1/chat/completions", body, headers)
    assert [json.loads(e[6:]) for e in events(proxied)[:-1]] == [
        json.loads(e[6:]) for e in events(direct)[:-1]
    ]
    assert b"usage" not in proxied
    assert (
        'latency_proxy_tokens_per_chunk_bucket{gen_ai_operation_name="chat",'
        f'gen_ai_request_model="{MODEL}",latency_proxy_route="default",le="3.0"}} 3.0'
        in proxy.metrics()
    )


def test_request_id_kept_validated_generated(proxy, upstream) -> None:
    good = "client.id:123-abc_" + uuid.uuid4().hex[:8]
    r = httpx.post(
        proxy.url + "/v1/completions",
        json={"model": "m", "prompt": "x"},
        headers={"x-request-id": good},
        timeout=10,
    )
    assert r.headers["x-request-id"] == good
    assert upstream.received[-1].headers["x-request-id"] == good
    for bad in ["has space", "x" * 129, "semi;colon", "a\tb"]:
        r = httpx.post(
            proxy.url + "/v1/completions",
            json={"model": "m", "prompt": "x"},
            headers={"x-request-id": bad},
            timeout=10,
        )
        generated = r.headers["x-request-id"]
        assert str(uuid.UUID(generated)) == generated
        assert upstream.received[-1].headers["x-request-id"] == generated
    r = httpx.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "x"}, timeout=10)
    assert uuid.UUID(r.headers["x-request-id"]).version == 4


def test_headers_hop_by_hop_dropped_end_to_end_kept(proxy, upstream) -> None:
    rid = "hdr-" + uuid.uuid4().hex
    r = httpx.post(
        proxy.url + "/tokenize?x=1",
        content=b'{"prompt": "p"}',
        headers={
            "x-request-id": rid,
            "x-custom-thing": "yes",
            "authorization": "Bearer k",
            "connection": "keep-alive, x-drop-me",
            "x-drop-me": "1",
            "te": "trailers",
            "keep-alive": "timeout=5",
            "content-type": "application/json",
        },
        timeout=10,
    )
    assert r.status_code == 200
    got = upstream.received[-1]
    assert (got.path, got.method, got.query) == ("/tokenize", "POST", "x=1")
    sent = got.headers
    assert sent["x-custom-thing"] == "yes" and sent["authorization"] == "Bearer k"
    assert sent["content-type"] == "application/json"
    assert "x-drop-me" not in sent and "te" not in sent and "keep-alive" not in sent
    assert "user-agent" in sent  # the client's own, not replaced
    assert sent["x-forwarded-for"] == "127.0.0.1"
    assert r.headers["x-upstream-unknown"] == "kept"


@pytest.mark.parametrize("path", ["/health", "/version", "/metrics", "/tokenize"])
def test_every_path_passes_through(proxy, upstream, path: str) -> None:
    before = len(upstream.received)
    r = httpx.get(proxy.url + path, timeout=10)
    passed = [got.path for got in upstream.received[before:] if got.path != "/v1/models"]
    assert passed == [path]  # (listings are the proxies' own: models_list.learn_models)
    assert r.status_code == httpx.get(upstream.url + path, timeout=10).status_code


def test_non_streaming_measured(proxy) -> None:
    rid = "ns-" + uuid.uuid4().hex
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"x-request-id": rid, "x-script": json.dumps({"tokens": 4})},
        timeout=10,
    )
    assert r.json()["usage"]["completion_tokens"] == 4
    log = proxy.request_logs(rid)[0]
    assert (log["output_tokens"], log["input_tokens"], log["ttft_s"]) == (4, 7, None)


def test_routes_by_model_and_lists_models(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream", f"llama-70b={upstream.url}", "--upstream", "qwen-72b=http://127.0.0.1:9"
    )
    r = httpx.post(
        proxy.url + "/v1/completions", json={"model": "llama-70b", "prompt": "x"}, timeout=10
    )
    assert r.status_code == 200
    r = httpx.post(
        proxy.url + "/v1/completions", json={"model": "mistral", "prompt": "x"}, timeout=10
    )
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["type"] == "NotFoundError" and error["param"] == "model"
    assert "llama-70b" in error["message"] and "qwen-72b" in error["message"]
    r = httpx.post(
        proxy.url + "/v1/completions", json={"model": "qwen-72b", "prompt": "x"}, timeout=10
    )
    assert r.status_code == 502  # routed to the dead upstream
    models = httpx.get(proxy.url + "/v1/models", timeout=10).json()
    assert sorted(m["id"] for m in models["data"]) == ["qwen-72b", "scripted"]


def test_a_model_name_with_control_characters_is_never_echoed_raw(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", f"llama-70b={upstream.url}")
    model = "evil\x1b[2J\r\nforged: line\x07\x7f\x9b31m"  # ESC, CR LF, BEL, DEL, C1 CSI
    rid = "cc-" + uuid.uuid4().hex
    r = httpx.post(
        proxy.url + "/v1/completions",
        json={"model": model, "prompt": "x"},
        headers={"x-request-id": rid},
        timeout=10,
    )
    assert r.status_code == 404
    message = r.json()["error"]["message"]
    assert "`evil\\x1b[2J\\x0d\\x0aforged: line\\x07\\x7f\\x9b31m`" in message
    logged = json.dumps(proxy.request_logs(rid)[0], ensure_ascii=False)
    for shown in (message, logged):
        assert not [c for c in shown if unicodedata.category(c) == "Cc"], shown
