"""Capture off: prompt and completion text reach no log line, span, metric or error message.

A canary string rides in prompts, completions, headers and bodies down every path — ok,
non-streaming, malformed, upstream errors, upstream death, client abort, 413, 404, a body
that never completes (408), a stream left with a request pipelined behind it, HTTP/1.0 —
and is then searched for in the proxy's whole log output, every OTLP payload and /metrics.
"""

from __future__ import annotations

import json
import socket
import time

import httpx

from tests.support.proxy import disconnect_mid_stream, proxy_env, read_raw

CANARY = "CANARY-7f3a9c-do-not-leak"


def test_canary_never_leaves_the_proxy_with_capture_off(start_proxy, upstream) -> None:
    from tests.support.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as otlp:
        proxy = start_proxy(
            "--upstream",
            upstream.url,
            "--max-body-size",
            "4KiB",
            "--body-timeout",
            "300ms",
            env=proxy_env(otlp),
        )
        prompt = {"role": "user", "content": f"my secret is {CANARY}"}
        chat = {"model": "m", "messages": [prompt]}
        answer = {"text": f" {CANARY} "}
        cases: list[tuple[str, bytes, dict]] = [
            (
                "/v1/chat/completions",
                json.dumps({**chat, "stream": True}).encode(),
                {"tokens": 3, **answer},
            ),
            ("/v1/chat/completions", json.dumps(chat).encode(), {"tokens": 2, **answer}),
            (
                "/v1/completions",
                json.dumps(
                    {
                        "model": "m",
                        "prompt": CANARY,
                        "stream": True,
                        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    }
                ).encode(),
                {"tokens": 2, **answer},
            ),
            ("/v1/chat/completions", f'{{"model": "m", "messages": ["{CANARY}'.encode(), {}),
            (
                "/v1/chat/completions",
                json.dumps(chat).encode(),
                {"status": 400, "error_body": json.dumps({"error": {"message": CANARY}})},
            ),
            (
                "/v1/chat/completions",
                json.dumps(chat).encode(),
                {"status": 500, "error_body": json.dumps({"error": {"message": CANARY}})},
            ),
            (
                "/v1/chat/completions",
                json.dumps({**chat, "stream": True}).encode(),
                {"tokens": 5, "die_after": 2, **answer},
            ),
            ("/v1/chat/completions", json.dumps({**chat, "pad": CANARY * 300}).encode(), {}),
            ("/tokenize", json.dumps({"model": "m", "prompt": CANARY}).encode(), {}),
        ]
        with httpx.Client(timeout=10) as client:
            for path, body, script in cases:
                headers = {
                    "x-script": json.dumps(script),
                    "authorization": f"Bearer {CANARY}",
                    "content-type": "application/json",
                }
                with client.stream("POST", proxy.url + path, content=body, headers=headers) as r:
                    read_raw(r)  # (the stream whose upstream dies is cut for the client too)
        script = json.dumps({"tokens": 100, "itl": 0.02, "text": CANARY})
        disconnect_mid_stream(
            proxy.url,
            json.dumps({**chat, "stream": True}).encode(),
            {"x-script": script},
            CANARY.encode(),
        )
        recorded = len(cases) + 1 + _raw_socket_cases(proxy.port, chat)
        for _ in range(100):  # every request recorded (its log line) before reading metrics
            if proxy.output().count('"msg":"request"') == recorded:
                break
            time.sleep(0.05)
        metrics = proxy.metrics() + proxy.metrics(openmetrics=True)
        otlp.wait_for_spans(lambda spans: len(spans) >= recorded, timeout=10)
        proxy.stop()
        logs = proxy.output()
        assert logs.count('"msg":"request"') == recorded
        assert CANARY not in logs
        assert CANARY not in metrics
        payloads = otlp.raw_payloads()
        assert payloads and not any(CANARY.encode() in p for p in payloads)


def _raw_socket_cases(port: int, chat: dict) -> int:
    """The client-side faults only a raw socket can play; returns how many are requests."""
    stream = json.dumps({**chat, "stream": True}).encode()
    script = json.dumps({"tokens": 50, "itl": 0.02, "text": CANARY})

    def post(body: bytes, version: str = "1.1", length: int | None = None) -> bytes:
        head = (
            f"POST /v1/chat/completions HTTP/{version}\r\nhost: x\r\nx-script: {script}\r\n"
            f"content-length: {len(body) if length is None else length}\r\n\r\n"
        )
        return head.encode() + body

    def exchange(data: bytes, until: bytes | None = None) -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(data)
            sock.settimeout(10)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
                if until is not None and received.count(until) >= 2:
                    return  # and the client leaves

    exchange(post(stream[:-5], length=len(stream)))  # the body never completes: 408
    exchange(post(stream) + post(stream), until=CANARY.encode())  # pipelined, then gone
    exchange(post(stream, version="1.0"))
    return 3
