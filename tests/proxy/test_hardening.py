"""Hostile or careless input gets a clear answer; secrets and limits hold."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import aiohttp
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latency_proxy.measure.sse import SSEParser
from tests.support.proxy import proxy_env
from tests.support.raw_upstream import RawRequest, RawUpstream, Reply, response
from tests.support.scripted_upstream import Upstream, serve


def test_too_many_or_too_large_headers_get_431(proxy) -> None:
    many = {f"x-h{i}": "v" for i in range(150)}
    r = httpx.post(
        proxy.url + "/v1/completions", json={"model": "m", "prompt": "x"}, headers=many, timeout=10
    )
    assert r.status_code == 431
    assert r.json()["error"]["type"] == "RequestHeaderFieldsTooLarge"
    r = httpx.post(
        proxy.url + "/v1/completions",
        json={"model": "m", "prompt": "x"},
        headers={"x-big": "v" * 40_000},
        timeout=10,
    )
    assert r.status_code == 431


def test_concurrency_limit_gives_503_with_retry_after(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream", upstream.url, "--max-concurrent-requests", "2", "--retry-after", "3s"
    )
    body = {"model": "m", "stream": True, "prompt": "x"}
    script = json.dumps({"tokens": 10, "itl": 0.1})
    rids = ["busy-" + uuid.uuid4().hex for _ in range(2)]
    done = []

    def run(rid: str) -> None:
        headers = {"x-script": script, "x-request-id": rid}
        with httpx.stream(
            "POST", proxy.url + "/v1/completions", json=body, headers=headers, timeout=10
        ) as r:
            done.append((r.status_code, len(b"".join(r.iter_raw()))))

    workers = [threading.Thread(target=run, args=(rid,)) for rid in rids]
    for w in workers:
        w.start()
    for _ in range(100):  # both in flight: the upstream has their requests (a 1 s stream each)
        if set(rids) <= {r.headers.get("x-request-id") for r in upstream.received}:
            break
        time.sleep(0.05)
    r = httpx.post(proxy.url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["type"] == "ServiceUnavailable"
    for w in workers:
        w.join()
    assert [s for s, _ in done] == [200, 200]
    assert httpx.post(proxy.url + "/v1/completions", json=body, timeout=10).status_code == 200
    assert (
        'http_response_status_code="503",latency_proxy_route="default",outcome="rejected"'
        in proxy.metrics()
    )


@pytest.fixture(scope="module")
def tls_upstream(tmp_path_factory) -> tuple[Upstream, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    with serve(ssl_certfile=str(cert), ssl_keyfile=str(key)) as app:
        yield app, cert


def test_https_upstream_with_ca_bundle(start_proxy, tls_upstream) -> None:
    app, cert = tls_upstream
    trusted = start_proxy("--upstream", app.url, "--ca-bundle", str(cert))
    r = httpx.post(trusted.url + "/v1/completions", json={"model": "m", "prompt": "x"}, timeout=10)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
    untrusted = start_proxy("--upstream", app.url)
    r = httpx.post(
        untrusted.url + "/v1/completions", json={"model": "m", "prompt": "x"}, timeout=10
    )
    assert r.status_code == 502


def test_route_credentials_are_injected_and_never_recorded(
    start_proxy, upstream, otlp, tmp_path
) -> None:
    secret_file = tmp_path / "qwen.key"
    secret_file.write_text("sk-file-SECRETqwen\n")
    env = proxy_env(otlp, LLAMA_KEY="sk-env-SECRETllama")
    proxy = start_proxy(
        "--upstream",
        f"llama={upstream.url}",
        "--upstream",
        f"qwen={upstream.url}",
        "--upstream-api-key",
        "llama=env:LLAMA_KEY",
        "--upstream-api-key",
        f"qwen=file:{secret_file}",
        env=env,
    )
    rids = []
    for model, key in (("llama", "sk-env-SECRETllama"), ("qwen", "sk-file-SECRETqwen")):
        rid = "cred-" + uuid.uuid4().hex
        rids.append(rid)
        httpx.post(
            proxy.url + "/v1/completions",
            json={"model": model, "prompt": "x"},
            headers={"authorization": "Bearer client-own", "x-request-id": rid},
            timeout=10,
        )
        sent = next(r for r in upstream.received if r.headers.get("x-request-id") == rid)
        assert sent.headers["authorization"] == f"Bearer {key}"
    # every sink has written these requests (positive events) before checking what is absent
    for rid in rids:
        assert len(proxy.request_logs(rid)) == 1
    otlp.wait_for_spans(
        lambda spans: (
            {(s.kind, s.attributes.get("latency_proxy.request_id")) for s in spans}
            >= {(kind, rid) for kind in ("SERVER", "CLIENT") for rid in rids}
        )
    )
    otlp.wait_for_metrics(
        lambda points: (
            {
                p.attributes.get("latency_proxy.route")
                for p in points
                if p.name == "latency_proxy.requests"
            }
            >= {"llama", "qwen"}
        )
    )
    assert "SECRET" not in proxy.output() and "SECRET" not in proxy.metrics()
    assert not any(b"SECRET" in p for p in otlp.raw_payloads())


def test_credentials_in_an_upstream_url_go_as_basic_and_nowhere_else(
    start_proxy, upstream, otlp
) -> None:
    user_url = upstream.url.replace("http://", "http://llama%40team:pw-SECRET%3A1@")
    proxy = start_proxy("--upstream", user_url, env=proxy_env(otlp))
    rid = "basic-" + uuid.uuid4().hex
    httpx.post(
        proxy.url + "/v1/completions",
        json={"model": "m", "prompt": "x"},
        headers={"authorization": "Bearer client-own", "x-request-id": rid},
        timeout=10,
    )
    sent = next(r for r in upstream.received if r.headers.get("x-request-id") == rid)
    assert (
        sent.headers["authorization"]
        == "Basic " + base64.b64encode(b"llama@team:pw-SECRET:1").decode()
    )
    assert len(proxy.request_logs(rid)) == 1
    otlp.wait_for_spans(
        lambda spans: (
            {(s.kind, s.attributes.get("latency_proxy.request_id")) for s in spans}
            >= {("SERVER", rid), ("CLIENT", rid)}
        )
    )
    assert "SECRET" not in proxy.output() and "SECRET" not in proxy.metrics()
    assert not any(b"SECRET" in p for p in otlp.raw_payloads())


def test_missing_route_credential_fails_at_start(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream",
        f"llama={upstream.url}",
        "--upstream-api-key",
        "llama=env:NOT_SET_ANYWHERE",
        ready=False,
    )
    assert proxy.process.wait(20) == 2
    assert "NOT_SET_ANYWHERE: variable is not set" in proxy.output()


@pytest.mark.parametrize("source", ["env", "file"])
def test_a_route_key_that_cannot_be_a_header_value_is_refused_at_start(
    start_proxy, upstream, tmp_path, source: str
) -> None:
    key = "sk-SECRETKEY\r\nx-injected: 1"  # test_config.py tries the other bytes
    env = proxy_env(None)
    if source == "env":
        env["ROUTE_KEY"] = key
        spec = "llama=env:ROUTE_KEY"
    else:
        path = tmp_path / "route.key"
        path.write_bytes(key.encode() + b"\n")
        spec = f"llama=file:{path}"
    proxy = start_proxy(
        "--upstream", f"llama={upstream.url}", "--upstream-api-key", spec, env=env, ready=False
    )
    assert proxy.process.wait(20) == 2
    output = proxy.output()
    assert f"--upstream-api-key {spec}: the key holds CR, LF, NUL" in output
    assert "SECRET" not in output and "Traceback" not in output


def test_admin_token_guards_metrics_only(start_proxy, upstream, tmp_path) -> None:
    token = tmp_path / "admin.token"
    token.write_text("s3cret-admin\n")
    proxy = start_proxy("--upstream", upstream.url, "--admin-token-file", str(token))
    assert httpx.get(proxy.admin + "/metrics").status_code == 401
    assert (
        httpx.get(proxy.admin + "/metrics", headers={"authorization": "Bearer wrong"}).status_code
        == 401
    )
    ok = httpx.get(proxy.admin + "/metrics", headers={"authorization": "Bearer s3cret-admin"})
    assert ok.status_code == 200 and "latency_proxy" in ok.text
    assert httpx.get(proxy.admin + "/healthz").status_code == 200
    # the main port never serves admin endpoints: /metrics there is the upstream's
    assert "vllm:" in httpx.get(proxy.url + "/metrics").text


def unlisted(request: RawRequest) -> Reply:
    """An upstream with no /v1/models that answers any model: names it answered are
    recorded as they came (telemetry.ModelLabels), so their escaping is what is tested."""
    if request.target == b"/v1/models":
        return Reply(response(b"{}", status=b"404 Not Found"))
    return Reply(response(b'{"choices": []}', b"content-type: application/json"))


def test_no_log_injection_through_ids_or_model_names(start_proxy) -> None:
    with RawUpstream(unlisted) as upstream:
        proxy = start_proxy("--upstream", upstream.url, "--log-format", "text")
        httpx.post(
            proxy.url + "/v1/completions",
            timeout=10,
            content=json.dumps({"model": "evil\nFORGED level=error msg=x", "prompt": "x"}),
        )
        with socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]))) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-request-id: a\rFORGED b\r\n\r\n")
            sock.recv(4096)
        for _ in range(100):  # both requests' own lines first, then what must not be there
            text = proxy.output()
            if "evil\\x0aFORGED" in text and "Invalid HTTP request received." in text:
                break
            time.sleep(0.05)
        lines = text.splitlines()
        assert any("evil\\x0aFORGED" in line for line in lines)
        assert any("Invalid HTTP request received." in line for line in lines)
        assert not any(line.startswith("FORGED") for line in lines)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_sse_parser_survives_random_bytes(chunks: list[bytes]) -> None:
    parser = SSEParser()
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    assert b"".join(e.raw for e in events) + parser.remainder() == b"".join(chunks)


def _rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))


async def _hammer(url: str, count: int, seed: int) -> dict[int, int]:
    rng = random.Random(seed)
    statuses: dict[int, int] = {}
    bodies = [
        b"",
        b"{",
        b"[]",
        b"null",
        b'{"model": 1}',
        b'{"model": "m", "prompt": "x"}',
        b'{"model": "m", "stream": true, "prompt": "x"}',
        b"\xff\xfe\x00",
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}',
    ]
    paths = [
        "/v1/completions",
        "/v1/chat/completions",
        "/health",
        "/v1/models",
        "/x/%00/..",
        "/tokenize",
    ]
    connector = aiohttp.TCPConnector(limit=16)
    async with aiohttp.ClientSession(connector=connector) as session:
        semaphore = asyncio.Semaphore(16)

        async def one() -> None:
            body = rng.choice(bodies) + bytes(rng.randrange(256) for _ in range(rng.randrange(4)))
            headers = {"x-request-id": rng.choice(["ok-1", "bad id\t", "", "x" * 200])}
            async with (
                semaphore,
                session.post(url + rng.choice(paths), data=body, headers=headers) as r,
            ):
                await r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1

        await asyncio.gather(*(one() for _ in range(count)))
    return statuses


def test_random_requests_never_crash_and_memory_stays_flat(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--log-level", "warning")
    asyncio.run(_hammer(proxy.url, 1000, seed=1))  # warm caches and pools
    before = _rss_kb(proxy.process.pid)
    statuses = asyncio.run(_hammer(proxy.url, 10_000, seed=2))
    after = _rss_kb(proxy.process.pid)
    assert sum(statuses.values()) == 10_000
    assert set(statuses) <= {200, 400, 404, 405}, statuses
    assert after - before < 20_000, f"RSS grew {after - before} kB over 10,000 requests"
    log = proxy.output()
    assert "unhandled error" not in log and "Exception in ASGI application" not in log
    assert httpx.get(proxy.admin + "/healthz").status_code == 200
