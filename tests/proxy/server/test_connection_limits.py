"""Hostile clients on the main port: a head that never ends is refused at the limit as it
arrives, and silent or slowloris connections are closed on time
(latency_proxy/server/http_protocol.py)."""

from __future__ import annotations

import json
import re
import select
import socket
import time
from pathlib import Path

import httpx

from tests.support.slow_client import trickling
from tests.support.timing import on_time, wall_clock

HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nx-big: "


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))


def _closed_after(sock: socket.socket, limit: float = 5.0) -> float:
    """Read until the proxy closes the connection; seconds from now until it did."""
    t = time.perf_counter()
    sock.settimeout(limit)
    while sock.recv(65536):
        pass
    return time.perf_counter() - t


def test_a_header_that_never_ends_is_refused_at_the_limit(proxy) -> None:
    before = _rss_kb(proxy.process.pid)
    sent = 0
    answer = b""
    with socket.create_connection(("127.0.0.1", _port(proxy.url))) as sock:
        sock.sendall(HEAD)
        piece = b"a" * 65536
        try:
            while sent < 64 * 2**20 and not answer:  # a 64 MiB header value, never ended
                if select.select([sock], [], [], 0)[0]:
                    answer = sock.recv(65536)
                    break
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(5)
        answer += sock.recv(65536) if not answer else b""
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert b"RequestHeaderFieldsTooLarge" in answer
    # refused while the value was still arriving: long before 64 MiB, with memory flat
    assert sent < 16 * 2**20, f"{sent} bytes were taken before the refusal"
    assert _rss_kb(proxy.process.pid) - before < 20_000
    # the refusal is the connection's, not the process's: the next request is served
    assert httpx.get(proxy.url + "/health", timeout=5).status_code == 200


@wall_clock
def test_a_silent_connection_is_closed_at_the_header_timeout(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--header-timeout", "500ms")
    with socket.create_connection(("127.0.0.1", _port(proxy.url))) as sock:
        waited = _closed_after(sock)
    assert on_time(waited, 0.5), waited


@wall_clock
def test_a_slowloris_head_is_closed_at_the_header_timeout(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--header-timeout", "500ms")
    with socket.create_connection(("127.0.0.1", _port(proxy.url))) as sock:
        t = time.perf_counter()
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: ")
        with trickling(sock, b"a"):
            _closed_after(sock)
    assert on_time(time.perf_counter() - t, 0.5)


@wall_clock
def test_a_kept_alive_connection_is_closed_at_the_idle_timeout(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream", upstream.url, "--idle-timeout", "500ms", "--header-timeout", "5s"
    )
    with socket.create_connection(("127.0.0.1", _port(proxy.url))) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")  # /health: a short answer
        waited = _closed_after(sock)
    assert on_time(waited, 0.5), waited


def test_timeouts_never_cut_a_request_in_progress(start_proxy, upstream) -> None:
    proxy = start_proxy(
        "--upstream", upstream.url, "--header-timeout", "300ms", "--idle-timeout", "300ms"
    )
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-script": json.dumps({"tokens": 10, "itl": 0.1})},  # a 1 s stream
        timeout=10,
    ) as r:
        raw = b"".join(r.iter_raw())
    assert raw.count(b'"content":"tok ') == 10 and b"[DONE]" in raw
