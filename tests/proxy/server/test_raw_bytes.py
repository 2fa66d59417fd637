"""What the proxy need not change goes upstream as it came: the request target undecoded,
header bytes not re-encoded (tests/support/raw_upstream.py records them byte for byte)."""

from __future__ import annotations

import re
import socket

import pytest

from tests.support.raw_upstream import RawRequest, RawUpstream, Reply, response


@pytest.fixture(scope="module")
def tenant(start_module_proxy):
    """A proxy whose upstream base URL has a path: the tenant a client must not leave."""

    def respond(request: RawRequest) -> Reply:
        return Reply(response(b"ok"))

    with RawUpstream(respond) as upstream:
        yield start_module_proxy("--upstream", upstream.url + "/tenant-a"), upstream


def send_raw(url: str, head: bytes) -> bytes:
    """The answer to one raw request head: its head and its Content-Length body."""
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(head + b"\r\n\r\n")
        sock.settimeout(5)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < _answer_size(answer):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        return answer


def _answer_size(answer: bytes) -> int:
    head, _, _ = answer.partition(b"\r\n\r\n")
    found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return len(head) + 4 + (int(found.group(1)) if found else 0)


@pytest.mark.parametrize(
    "target",
    [
        b"/a%2Fb%3Fc",
        b"/v1/a/../b",  # climbs, but stays under the base path
        b"/v1/a/%2e%2E/b?next=/../../x",  # a query is no path
        b"/a..b/.../.well-known/%2e/x",  # dots that are no dot-segment
        b"/%252e%252e/x",  # decoded once: `%2e%2e`, a name
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
    "target",
    [
        b"/../tenant-b/secret",
        b"/%2e%2e/tenant-b/secret",
        b"/%2E%2E/tenant-b/secret",
        b"/.%2e/tenant-b/secret",
        b"/v1/../../tenant-b/secret",
        b"/v1/%2e%2e/%2E%2e/tenant-b/secret?x=1",
        b"/./../tenant-b/secret",
        b"//../tenant-b/secret",  # an upstream that merges slashes
        b"/..;/tenant-b/secret",  # one that cuts ;params first
        b"/v1/..%2f..%2ftenant-b/secret",  # one that decodes %2F first
        b"/..",
    ],
)
def test_a_target_that_climbs_above_the_base_path_is_refused(tenant, target: bytes) -> None:
    proxy, upstream = tenant
    before = len(upstream.requests)
    answer = send_raw(proxy.url, b"GET " + target + b" HTTP/1.1\r\nhost: x")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"BadRequestError" in answer
    assert len(upstream.requests) == before  # nothing went upstream


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
