"""What the proxy need not change goes upstream as it came: the request target undecoded,
header bytes not re-encoded (tests/support/raw_upstream.py records them byte for byte)."""

from __future__ import annotations

import socket

import pytest

from tests.support.raw_upstream import RawRequest, RawUpstream, Reply, response


@pytest.fixture(scope="module")
def tenant(start_proxy):
    """A proxy whose upstream base URL has a path: the tenant a client must not leave."""

    def respond(request: RawRequest) -> Reply:
        return Reply(response(b"ok"))

    with RawUpstream(respond) as upstream:
        yield start_proxy("--upstream", upstream.url + "/tenant-a"), upstream


def send_raw(url: str, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(head + b"\r\n\r\n")
        sock.settimeout(5)
        return sock.recv(65536)


@pytest.mark.parametrize(
    "target",
    [
        b"/%2e%2e/tenant-b/v1/models",
        b"/a%2Fb%3Fc",
        b"/files/x%20y?q=%41%2F%3F&r=a+b",
        b"/%C3%A9t%C3%A9?x=%25",
    ],
)
def test_the_request_target_is_forwarded_undecoded(tenant, target: bytes) -> None:
    proxy, upstream = tenant
    answer = send_raw(proxy.url, b"GET " + target + b" HTTP/1.1\r\nhost: x")
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert upstream.requests[-1].target == b"/tenant-a" + target


@pytest.mark.parametrize(
    "value",
    [
        "café, naïve ✓".encode(),
        b"caf\xe9 \xff\x80",  # obs-text that is not UTF-8 (latin-1): goes as it came too
    ],
)
def test_header_bytes_are_forwarded_unchanged(tenant, value: bytes) -> None:
    proxy, upstream = tenant
    answer = send_raw(proxy.url, b"GET /h HTTP/1.1\r\nhost: x\r\nx-text: " + value)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert upstream.requests[-1].header(b"x-text") == value
