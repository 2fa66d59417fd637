"""Hostile or old clients on the main port, over raw sockets: every phase of the client's
connection has a timer, the response is framed for the client's HTTP version, and a client
that leaves is recorded as the client's (latency_proxy/server/http_protocol.py,
docs/proxy/faults.md)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from pathlib import Path

import orjson
import pytest

from tests.support.raw_upstream import RawUpstream, Reply, response
from tests.support.slow_client import trickling
from tests.support.timing import on_time, wall_clock

STREAM = b'{"model": "m", "stream": true, "prompt": "x"}'


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _read_until_closed(sock: socket.socket, limit: float = 10.0) -> bytes:
    sock.settimeout(limit)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"POST {path} HTTP/{version}", "host: x", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _record(proxy, request_id: str) -> dict:
    lines = proxy.request_logs(request_id)
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def timed_proxy(start_module_proxy, upstream):
    return start_module_proxy(
        "--upstream", upstream.url, "--body-timeout", "500ms", "--header-timeout", "5s"
    )


@wall_clock
def test_a_body_that_never_comes_gets_408_at_the_body_timeout(timed_proxy) -> None:
    rid = "body-late-" + uuid.uuid4().hex
    with socket.create_connection(("127.0.0.1", _port(timed_proxy.url))) as sock:
        head = _post("/v1/completions", b"", f"x-request-id: {rid}").replace(
            b"content-length: 0", b"content-length: 100"
        )
        sock.sendall(head + b'{"mo')
        t = time.perf_counter()
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert on_time(time.perf_counter() - t, 0.5)
    record = _record(timed_proxy, rid)
    assert record["status"] == 408 and record["error_type"] == "RequestTimeout"


@wall_clock
def test_a_trickled_body_is_cut_at_the_body_timeout(timed_proxy) -> None:
    with socket.create_connection(("127.0.0.1", _port(timed_proxy.url))) as sock:
        sock.sendall(_post("/v1/completions", b"x" * 10_000)[:-10_000])
        t = time.perf_counter()
        with trickling(sock, b"x"):
            answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert on_time(time.perf_counter() - t, 0.5)


def _client_sockets(pid: int, port: int) -> int:
    """The proxy's open fds that are connections accepted on its main port (its listening
    socket and its upstream connections aside)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            listening = fields[3] == "0A"
            count += local_port == port and not listening and fields[9] in inodes
    return count


@wall_clock
def test_the_write_timeout_closes_the_clients_socket(start_proxy) -> None:
    big = b"x" * (32 * 2**20)  # far more than the socket buffers of both ends hold
    with RawUpstream(lambda request: Reply(response(big))) as raw:
        proxy = start_proxy("--upstream", raw.url, "--write-timeout", "2s")
        pid = proxy.process.pid
        clients = []
        for _ in range(5):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", proxy.port))
            sock.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            clients.append(sock)  # and never read
        try:
            deadline = time.monotonic() + 1.5  # well within the write timeout
            while _client_sockets(pid, proxy.port) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _client_sockets(pid, proxy.port) == 5  # the five answers are going out
            deadline = time.monotonic() + 8
            while _client_sockets(pid, proxy.port) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _client_sockets(pid, proxy.port) == 0, "the proxy kept non-readers' sockets"
            for sock in clients:  # the proxy's end went away: reading ends in EOF or a reset
                with contextlib.suppress(ConnectionResetError):
                    _read_until_closed(sock, 5)
        finally:
            for sock in clients:
                sock.close()


def test_an_http_1_0_request_gets_a_close_delimited_answer(proxy) -> None:
    rid = "http10-" + uuid.uuid4().hex
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(_post("/v1/completions", STREAM, f"x-request-id: {rid}", version="1.0"))
        answer = _read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    # the body is the event stream as the upstream sent it, with no chunk framing
    assert body.startswith(b"data: {"), body[:80]
    assert body.endswith(b"data: [DONE]\n\n")
    record = _record(proxy, rid)
    assert record["outcome"] == "ok" and record["bytes_out"] == len(body)


def test_an_http_1_0_request_to_the_proxys_own_answer_keeps_its_length(proxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.0\r\ncontent-length: 999999999\r\n\r\n")
        answer = _read_until_closed(sock)  # a 413 of the proxy's own
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"transfer-encoding" not in head.lower()
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert orjson.loads(body)["error"]["type"] == "RequestTooLarge"


def test_head_keeps_the_upstreams_content_length(start_proxy) -> None:
    def respond(request):
        return Reply(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1234\r\n\r\n")

    with RawUpstream(respond) as raw:
        proxy = start_proxy("--upstream", raw.url)
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.sendall(b"HEAD /file HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-length: 1234" in head.lower()
    assert b"transfer-encoding" not in head.lower() and body == b""


def test_a_client_that_pipelines_behind_a_stream_and_leaves_is_a_client_abort(proxy) -> None:
    rid = "pipelined-" + uuid.uuid4().hex
    script = json.dumps({"tokens": 20, "itl": 0.05})
    first = _post("/v1/completions", STREAM, f"x-request-id: {rid}", f"x-script: {script}")
    second = _post("/v1/completions", STREAM, f"x-request-id: {rid}-2")
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(first + second)
        sock.settimeout(5)
        received = b""
        while received.count(b"data: ") < 2:
            received += sock.recv(65536)
    record = _record(proxy, rid)
    assert record["outcome"] == "client_abort", (record, proxy.output()[-4000:])
    time.sleep(0.3)
    output = proxy.output()
    assert "unhandled error" not in output
    assert "without completing response" not in output
    assert proxy.request_logs(rid + "-2", timeout=0.5) == []  # never started: not a request


def test_a_huge_path_is_cut_in_the_log_line_and_says_so(proxy) -> None:
    rid = "long-path-" + uuid.uuid4().hex
    path = "/" + "a" * 60_000
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        head = f"GET {path} HTTP/1.1\r\nhost: x\r\nx-request-id: {rid}\r\nconnection: close"
        sock.sendall(head.encode() + b"\r\n\r\n")
        _read_until_closed(sock)
    record = _record(proxy, rid)
    assert len(record["path"]) <= 2048 + 1 and record["path"].endswith("…")
    assert record["path_length"] == len(path)
    line = next(x for x in proxy.output().splitlines() if rid in x and '"request"' in x)
    assert len(line) < 8192


def test_expect_100_continue_is_answered_when_the_body_is_read(proxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        head = _post("/v1/completions", b"", "expect: 100-continue", "connection: close")
        sock.sendall(head.replace(b"content-length: 0", b"content-length: %d" % len(STREAM)))
        sock.settimeout(5)
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(STREAM)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_a_body_declared_too_large_is_refused_before_100_continue(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--max-body-size", "1KiB")
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        head = _post("/v1/completions", b"", "expect: 100-continue")
        sock.sendall(head.replace(b"content-length: 0", b"content-length: 100000"))
        answer = _read_until_closed(sock)  # and the connection ends: the body is not read
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
    assert b"connection: close" in answer.lower()


def test_http_1_0_keep_alive_is_answered_and_closed(proxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"GET /health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"connection: close" in answer.lower()


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
    ],
    ids=["no-host", "two-hosts"],
)
def test_an_http_1_1_request_needs_exactly_one_host(proxy, head: bytes) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(head[:-2] + b"connection: close\r\n\r\n")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
    assert b"BadRequestError" in answer


def test_pipelined_requests_are_answered_in_order(proxy) -> None:
    script = json.dumps({"tokens": 5, "itl": 0.02})
    first = _post("/v1/completions", STREAM, "x-request-id: first", f"x-script: {script}")
    second = _post("/v1/completions", STREAM, "x-request-id: second", "connection: close")
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(first + second)
        answer = _read_until_closed(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert answer.index(b"x-request-id: first") < answer.index(b"x-request-id: second")
    assert answer.count(b"data: [DONE]") == 2
