"""The simulator over real HTTP on loopback: vLLM's wire format, its errors, CORS, lengths."""

from __future__ import annotations

import asyncio

import httpx

from tests.sim.app_server import MESSAGES, serve, stream


def test_chat_stream_shapes_and_request_id() -> None:
    async def go() -> tuple[httpx.Response, list[dict]]:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {
                "model": "sim",
                "messages": MESSAGES,
                "max_tokens": 3,
                "stream_options": {"include_usage": True},
            }
            _, payloads = await stream(
                client,
                server.url + "/v1/chat/completions",
                body,
                headers={"X-Request-Id": "req-42"},
            )
            head = await client.post(
                server.url + "/v1/chat/completions",
                json={**body, "stream": True},
                headers={"X-Request-Id": "req-43"},
            )
            return head, payloads

    with serve(ttft=0.01, itl=0.001) as server:
        response, payloads = asyncio.run(go())
    assert response.headers["x-request-id"] == "req-43"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "cache-control" not in response.headers  # vLLM's streams send none
    role, *content, usage = payloads
    assert all(p["id"] == "chatcmpl-req-42" and p["model"] == "sim" for p in payloads)
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in content] == [None, None, "length"]
    assert all(c["choices"][0]["delta"]["content"] for c in content)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert "usage" not in content[0]
    # the fingerprint rides on the last message only, the same on every response
    assert [p.get("system_fingerprint") for p in payloads[:-1]] == [None] * (len(payloads) - 1)
    assert usage["system_fingerprint"].startswith("loadgen-sim-")


def test_tokenize_counts_prompts_as_the_completions_endpoints_do() -> None:
    with serve(ttft=0.0, itl=0.0, served_model_name="m1", max_model_len=100) as server:
        count = httpx.post(server.url + "/tokenize", json={"model": "m1", "messages": MESSAGES})
        chat = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": "m1", "messages": MESSAGES, "max_tokens": 2},
        )
        text = httpx.post(server.url + "/tokenize", json={"prompt": "a b c d e"}).json()
        completion = httpx.post(
            server.url + "/v1/completions", json={"prompt": "a b c d e", "max_tokens": 2}
        ).json()
        cut = httpx.post(
            server.url + "/v1/completions",
            json={"prompt": "a b c d e", "max_tokens": 96, "ignore_eos": True},
        )
        too_long = httpx.post(server.url + "/v1/completions", json={"prompt": "a " * 101})
    assert count.json()["count"] == chat.json()["usage"]["prompt_tokens"] == 1 + 3 + 1
    assert count.json()["max_model_len"] == 100 and len(count.json()["tokens"]) == 5
    assert text["count"] == completion["usage"]["prompt_tokens"] == 5
    assert chat.json()["choices"][0]["message"]["role"] == "assistant"
    assert chat.json()["usage"]["completion_tokens"] == 2
    # vLLM 0.32 cuts max_tokens to what the context has left instead of refusing
    assert cut.status_code == 200 and cut.json()["usage"]["completion_tokens"] == 95
    assert cut.json()["choices"][0]["finish_reason"] == "length"
    assert too_long.status_code == 400
    assert too_long.json()["error"]["param"] == "input_tokens"
    assert "maximum context length is 100 tokens" in too_long.json()["error"]["message"]


def test_detokenize_reads_back_what_tokenize_returned() -> None:
    text = "the  quick brown\tfox, jumps"
    messages = [{"role": "user", "content": text}]
    with serve(ttft=0.0, itl=0.0, served_model_name="m1") as server:
        url = server.url
        ids = httpx.post(url + "/tokenize", json={"prompt": text}).json()["tokens"]
        back = httpx.post(url + "/detokenize", json={"model": "m1", "tokens": ids})
        again = httpx.post(url + "/tokenize", json={"prompt": back.json()["prompt"]}).json()
        chat_ids = httpx.post(url + "/tokenize", json={"messages": messages}).json()["tokens"]
        chat_text = httpx.post(url + "/detokenize", json={"tokens": chat_ids}).json()["prompt"]
        strs = httpx.post(url + "/tokenize", json={"prompt": "a b", "return_token_strs": True})
        unknown = httpx.post(url + "/detokenize", json={"tokens": [7, 8, ids[0]]}).json()
        empty = httpx.post(url + "/detokenize", json={"tokens": []}).json()
        bad = httpx.post(url + "/detokenize", json={"tokens": [-1]}, headers={"X-Request-Id": "d1"})
        other = httpx.post(url + "/detokenize", json={"model": "m2", "tokens": [1]})
    assert back.status_code == 200 and back.json() == {"prompt": "the quick brown fox, jumps"}
    assert back.headers["x-request-id"]  # echoed or made, as on every route
    assert again["tokens"] == ids  # a round trip: whitespace is all a text loses
    assert chat_text == "<|user|> the quick brown fox, jumps <|assistant|>"
    assert strs.json()["token_strs"] == ["a", "b"]
    assert unknown == {"prompt": "the"} and empty == {"prompt": ""}  # unknown ids: nothing
    assert bad.status_code == 400 and bad.headers["x-request-id"] == "d1"
    assert bad.json()["error"]["param"] == "body.tokens.0"
    assert bad.json()["error"]["type"] == "Bad Request"
    assert other.status_code == 404 and other.json()["error"]["type"] == "NotFoundError"


def test_errors_look_like_vllm_errors() -> None:
    with serve(ttft=0.0, itl=0.0) as server:
        unknown = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": "gpt-9", "messages": MESSAGES},
            headers={"X-Request-Id": "bad-1"},
        )
        malformed = httpx.post(
            server.url + "/v1/completions",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        bad_n = httpx.post(server.url + "/v1/completions", json={"prompt": "a", "n": 3})
        models = httpx.get(server.url + "/v1/models").json()
        health = httpx.get(server.url + "/health")
    assert unknown.status_code == 404 and unknown.headers["x-request-id"] == "bad-1"
    assert unknown.json() == {
        "error": {
            "message": "The model `gpt-9` does not exist. Valid aliases: sim.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    assert malformed.status_code == 400
    assert malformed.json()["error"] | {"message": ""} == {  # FastAPI's validation error
        "message": "",
        "type": "Bad Request",
        "param": "body.1",
        "code": 400,
    }
    assert bad_n.status_code == 400 and bad_n.json()["error"]["param"] == "n"
    assert [m["id"] for m in models["data"]] == ["sim"]
    assert health.status_code == 200


def test_cors_as_vllm_configures_it() -> None:
    body = {"model": "sim", "messages": MESSAGES, "max_tokens": 2}
    with serve(ttft=0.0, itl=0.0) as server:
        plain = [
            httpx.get(server.url + "/health"),
            httpx.post(server.url + "/v1/chat/completions", json=body),
            httpx.post(server.url + "/v1/chat/completions", json={**body, "model": "x"}),
        ]
        browser = httpx.post(
            server.url + "/v1/chat/completions", json=body, headers={"Origin": "http://ui"}
        )
        preflight = httpx.options(
            server.url + "/v1/chat/completions",
            headers={"Origin": "http://ui", "Access-Control-Request-Method": "POST"},
        )
    assert [r.headers.get("vary") for r in plain] == ["Origin"] * 3  # on every response
    assert browser.status_code == 200
    assert browser.headers["access-control-allow-origin"] == "*"
    assert preflight.status_code == 200
    assert "POST" in preflight.headers["access-control-allow-methods"]


def test_natural_output_length_is_seeded_and_stops_with_stop() -> None:
    body = {"prompt": "a prompt of some words", "max_tokens": 1000}
    with serve(ttft=0.0, itl=0.0, mean_output_tokens=20, seed=3) as server:
        first = httpx.post(server.url + "/v1/completions", json=body).json()
        again = httpx.post(server.url + "/v1/completions", json=body).json()
    with serve(ttft=0.0, itl=0.0, mean_output_tokens=20, seed=4) as server:
        reseeded = [
            httpx.post(
                server.url + "/v1/completions", json={**body, "prompt": f"prompt {i}"}
            ).json()
            for i in range(5)
        ]
    assert first["choices"][0]["finish_reason"] == "stop"
    assert first["choices"][0]["text"] == again["choices"][0]["text"]
    assert first["usage"] == again["usage"]
    assert len({r["usage"]["completion_tokens"] for r in reseeded}) > 1


def test_without_max_tokens_completions_stop_at_16_and_chat_at_eos() -> None:
    """vLLM's CompletionRequest defaults max_tokens to 16; a chat request has no default."""
    with serve(ttft=0.0, itl=0.0, mean_output_tokens=200, seed=3) as server:
        completion = httpx.post(server.url + "/v1/completions", json={"prompt": "a b"}).json()
        chat = httpx.post(server.url + "/v1/chat/completions", json={"messages": MESSAGES}).json()
    assert completion["usage"]["completion_tokens"] == 16
    assert completion["choices"][0]["finish_reason"] == "length"
    assert chat["choices"][0]["finish_reason"] == "stop"
    assert chat["usage"]["completion_tokens"] != 16
