"""Scripted mode (loadgen/sim/wire/script.py): off unless asked for; when on, each knob does what
its docstring says, on a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app
from loadgen.stack.processes import free_port
from tests.support.scripted_upstream import ServerThread, Upstream, arrivals, control, serve

CHAT = {"model": "any-name", "messages": [{"role": "user", "content": "a b c"}]}


@pytest.fixture(scope="module")
def scripted() -> Iterator[Upstream]:
    with serve({"tokens": 4}) as upstream:
        yield upstream


def events(raw: bytes) -> list[dict]:
    data = [e.raw[6:].strip() for e in SSEParser().feed(raw)]
    return [json.loads(d) for d in data if d != b"[DONE]"]


def test_without_a_script_nothing_is_read_recorded_or_routed() -> None:
    port = free_port()
    app = create_app(ttft=0.0, itl=0.0, served_model_name="plain")
    url = f"http://127.0.0.1:{port}"
    with ServerThread(app, port):
        body = {**CHAT, "model": "plain", "max_tokens": 3, "ignore_eos": True}
        r = httpx.post(url + "/v1/chat/completions", json=body, headers={"x-script": "{bad"})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        assert httpx.post(url + "/v1/chat/completions", json=CHAT).status_code == 404
        assert httpx.get(url + "/arrivals").status_code == 404
        assert httpx.post(url + "/control", json={"tokens": 1}).status_code == 404
    assert app.state.sim.scripting is None


def test_a_script_needs_fixed_timing() -> None:
    with pytest.raises(ValueError, match="fixed timing"):
        create_app("llama-70b-awq-tp4-a100", script={})


def test_the_header_overrides_the_servers_script(scripted: Upstream) -> None:
    script = {"tokens": 6, "per_chunk": 3, "text": "x ", "prompt_tokens": 11}
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    r = httpx.post(
        scripted.url + "/v1/chat/completions", json=body, headers={"x-script": json.dumps(script)}
    )
    chunks = events(r.content)
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert contents == ["x x x ", "x x x "]  # every chunk per_chunk tokens, the first included
    assert chunks[-1]["usage"]["prompt_tokens"] == 11
    assert chunks[0]["model"] == "any-name"  # any model, named as the request names it
    plain = httpx.post(scripted.url + "/v1/chat/completions", json=CHAT).json()
    assert plain["usage"]["completion_tokens"] == 4 and plain["usage"]["prompt_tokens"] == 1 + 3 + 1


def test_same_script_same_bytes(scripted: Upstream) -> None:
    headers = {"x-request-id": "same", "x-script": json.dumps({"text": "t "})}
    body = {**CHAT, "stream": True}
    first, second = (
        httpx.post(scripted.url + "/v1/chat/completions", json=body, headers=headers).content
        for _ in range(2)
    )
    assert first == second


def test_a_bad_script_is_refused(scripted: Upstream) -> None:
    for header in ("{not json", "[1]", '{"no_such_knob": 1}', '{"tokenizer": "bpe"}'):
        r = httpx.post(scripted.url + "/v1/completions", json=CHAT, headers={"x-script": header})
        assert r.status_code == 400 and "bad script" in r.json()["error"]["message"], header


def test_scripted_errors_and_what_was_received(scripted: Upstream) -> None:
    before = len(scripted.received)
    r = httpx.post(
        scripted.url + "/v1/completions?q=1",
        json={"prompt": "p"},
        headers={"x-script": json.dumps({"status": 503}), "x-request-id": "err-1"},
    )
    assert r.status_code == 503 and r.json()["error"]["type"] == "InternalServerError"
    (got,) = scripted.received[before:]
    assert (got.method, got.path, got.query) == ("POST", "/v1/completions", "q=1")
    assert got.headers["x-request-id"] == "err-1" and json.loads(got.body) == {"prompt": "p"}
    assert arrivals(scripted.url)[-1]["id"] == "err-1"


def test_die_after_cuts_the_stream(scripted: Upstream) -> None:
    body = {**CHAT, "stream": True}
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            scripted.url + "/v1/chat/completions",
            json=body,
            headers={"x-script": json.dumps({"die_after": 2})},
        ) as r,
    ):
        b"".join(r.iter_raw())


def test_control_changes_later_requests_and_fails_every_kth() -> None:
    with serve({}) as upstream:
        control(upstream.url, tokens=2, fail_every=2, fail_status=429)
        statuses = [
            httpx.post(upstream.url + "/v1/chat/completions", json=CHAT).status_code
            for _ in range(4)
        ]
        assert statuses == [200, 429, 200, 429]
        control(upstream.url, fail_every=0, tokenizer="subwords")
        r = httpx.post(upstream.url + "/v1/chat/completions", json=CHAT).json()
        assert r["usage"] == {"prompt_tokens": 3 + 3 + 2, "total_tokens": 10,
                              "completion_tokens": 2, "prompt_tokens_details": None,
                              "completion_tokens_details": None}  # fmt: skip
        tokens = httpx.post(upstream.url + "/tokenize", json={"prompt": "a longer"}).json()
        assert tokens["count"] == 1 + 1 + 2  # BOS, "a", "long" + "er"
