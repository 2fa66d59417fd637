"""Each content-capture mode records exactly what it promises, on every path.

Canaries ride in prompts, completions, credential headers, model names, malformed bodies
and upstream error bodies (hypothesis picks the combinations); afterwards the proxy's whole
log output, every OTLP payload a real receiver got, and /metrics are searched for them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import ROOT
from tests.support.proxy import disconnect_mid_stream, proxy_env, read_raw

KEY = "test-hmac-key"
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key", "cookie")


@pytest.fixture(scope="module")
def mode_proxies(start_module_proxy, upstream, otlp) -> dict:
    env = proxy_env(otlp, LATENCY_PROXY_CONTENT_HASH_KEY=KEY)
    return {
        mode: start_module_proxy(
            "--upstream",
            upstream.url,
            "--content-capture",
            mode,
            "--max-body-size",
            "8KiB",
            "--read-timeout",
            "1s",
            env=env,
        )
        for mode in ("off", "hash", "redacted", "full")
    }


def client_span(otlp, rid: str):
    spans = otlp.wait_for_spans(
        lambda s: any(
            x.kind == "CLIENT" and x.attributes.get("latency_proxy.request_id") == rid for x in s
        )
    )
    return next(
        s
        for s in spans
        if s.kind == "CLIENT" and s.attributes.get("latency_proxy.request_id") == rid
    )


def stream(proxy, body: dict, script: dict, rid: str, headers: dict | None = None) -> bytes:
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json=body,
        timeout=10,
        headers={"x-request-id": rid, "x-script": json.dumps(script), **(headers or {})},
    ) as r:
        return b"".join(r.iter_raw())


def chat(text: str, **extra: object) -> dict:
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}], **extra}


def test_hash_mode_records_keyed_hmacs(mode_proxies, otlp) -> None:
    rid = "hash-" + uuid.uuid4().hex
    stream(mode_proxies["hash"], chat("hello there"), {"tokens": 2, "text": "ab"}, rid)
    a = client_span(otlp, rid).attributes
    digest = hmac.new(KEY.encode(), b"hello there", hashlib.sha256).hexdigest()
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hmac-sha256:" + digest}]}
    ]
    out = hmac.new(KEY.encode(), b"abab", hashlib.sha256).hexdigest()
    assert json.loads(a["gen_ai.output.messages"])[0]["parts"][0]["content"] == "hmac-sha256:" + out
    log = mode_proxies["hash"].request_logs(rid)[0]
    assert digest in log["input_messages"]


def test_redacted_mode_scrubs_secrets_keeps_the_rest(mode_proxies, otlp) -> None:
    rid = "red-" + uuid.uuid4().hex
    stream(
        mode_proxies["redacted"],
        chat("mail jane@example.com about the weather"),
        {"tokens": 1, "text": "call +1 415-555-0100 tomorrow"},
        rid,
    )
    a = client_span(otlp, rid).attributes
    assert (
        json.loads(a["gen_ai.input.messages"])[0]["parts"][0]["content"]
        == "mail [REDACTED:email] about the weather"
    )
    assert (
        json.loads(a["gen_ai.output.messages"])[0]["parts"][0]["content"]
        == "call [REDACTED:phone] tomorrow"
    )
    assert json.loads(a["gen_ai.output.messages"])[0]["finish_reason"] == "length"


def test_full_mode_records_raw_text_and_warns(mode_proxies, otlp) -> None:
    rid = "full-" + uuid.uuid4().hex
    stream(mode_proxies["full"], chat("plain words"), {"tokens": 2, "text": "yo"}, rid)
    a = client_span(otlp, rid).attributes
    assert "plain words" in a["gen_ai.input.messages"] and "yoyo" in a["gen_ai.output.messages"]
    assert "content capture is FULL" in mode_proxies["full"].output()


def test_off_mode_records_no_message_attributes(mode_proxies, otlp) -> None:
    rid = "off-" + uuid.uuid4().hex
    stream(mode_proxies["off"], chat("plain words"), {"tokens": 2}, rid)
    a = client_span(otlp, rid).attributes
    assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a


def test_hash_mode_without_a_key_refuses_to_start() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "latency_proxy",
            "--upstream",
            "http://x:1",
            "--content-capture",
            "hash",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        env=proxy_env(None),
    )
    assert run.returncode == 2 and "needs a key" in run.stderr


PATHS = [
    "stream",
    "non_stream",
    "malformed",
    "upstream_400",
    "upstream_500",
    "die_mid_stream",
    "unknown_model",
    "too_large",
    "client_abort",
]


def _send(proxy, path: str, secret: str, credential: str) -> None:
    headers = {
        name: f"Bearer {credential}" if name.endswith("authorization") else credential
        for name in CREDENTIAL_HEADERS
    }
    body: object = chat(f"about {secret} today")
    script: dict = {"tokens": 3, "text": f" {secret} "}
    if path == "non_stream":
        body = {**chat(secret), "stream": False}
    elif path == "malformed":
        body = None
    elif path in ("upstream_400", "upstream_500"):
        script = {
            "status": int(path[-3:]),
            "error_body": json.dumps({"error": {"message": secret}}),
        }
    elif path == "die_mid_stream":
        script = {**script, "die_after": 1}
    elif path == "unknown_model":
        body = chat("x", model=secret)
        script = {"status": 404, "error_body": json.dumps({"error": {"message": secret}})}
    elif path == "too_large":
        body = chat(secret * 2000)
    if path == "client_abort":
        script = json.dumps({"tokens": 100, "itl": 0.01, "text": secret})
        disconnect_mid_stream(
            proxy.url, json.dumps(body).encode(), {"x-script": script}, secret.encode()
        )
        return
    content = (
        f'{{"model": "m", "messages": [{{"content": "{secret}'.encode()
        if body is None
        else json.dumps(body).encode()
    )
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        content=content,
        timeout=10,
        headers={**headers, "x-script": json.dumps(script), "content-type": "application/json"},
    ) as r:
        read_raw(r)  # (die_mid_stream's is cut for the client too)


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=10, max_size=10)


def test_canaries_never_leak_in_any_mode(mode_proxies, otlp) -> None:
    used: dict[str, list[str]] = {mode: [] for mode in mode_proxies}
    credentials: list[str] = []
    logged = {mode: _request_lines(proxy) for mode, proxy in mode_proxies.items()}
    server_spans = _server_spans(otlp.spans())

    @settings(
        max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(mode=st.sampled_from(sorted(mode_proxies)), path=st.sampled_from(PATHS), token=TOKEN)
    def run(mode: str, path: str, token: str) -> None:
        # in redacted mode the canary is a secret the detectors must catch
        secret = f"canary{token}@example.com" if mode == "redacted" else f"CANARY{mode}{token}"
        credential = f"CRED{token}"
        _send(mode_proxies[mode], path, secret, credential)
        used[mode].append(secret)
        credentials.append(credential)

    run()
    for path in PATHS:  # every path at least once in the strictest mode
        _send(mode_proxies["off"], path, "CANARYoffpath" + path, "CREDoffpath" + path)
        used["off"].append("CANARYoffpath" + path)
    # every request written to every sink (positive events) before checking what is absent
    for _ in range(200):
        if all(
            _request_lines(proxy) >= logged[mode] + len(used[mode])
            for mode, proxy in mode_proxies.items()
        ):
            break
        time.sleep(0.05)
    otlp.wait_for_spans(
        lambda spans: _server_spans(spans) >= server_spans + sum(map(len, used.values()))
    )
    texts = {
        mode: proxy.output() + proxy.metrics() + proxy.metrics(openmetrics=True)
        for mode, proxy in mode_proxies.items()
    }
    payloads = b"\n".join(otlp.raw_payloads())
    for mode in ("off", "hash", "redacted"):
        for secret in used[mode]:
            assert secret not in texts[mode], (mode, secret)
            assert secret.encode() not in payloads, (mode, secret)
    for credential in credentials:
        assert all(credential not in text for text in texts.values()), credential
        assert credential.encode() not in payloads, credential
    assert any(secret.encode() in payloads for secret in used["full"]) or not used["full"]


def _request_lines(proxy) -> int:
    return proxy.output().count('"msg":"request"')


def _server_spans(spans: list) -> int:
    return sum(s.kind == "SERVER" for s in spans)
