"""Hostile upstream answers through the whole proxy: each is a 502 the client can read,
recorded once as `upstream_error` kind `protocol`, with no traceback in the proxy's log.

The connection-level rules are in test_upstream_client.py; here the same bytes come from
a raw upstream (tests/support/raw_upstream.py) to a real proxy process, so what the client
gets and what the proxy logs are checked too.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.proxy import ProxyProcess, proxy_env
from tests.support.raw_upstream import RawRequest, RawUpstream, Reply

CHUNKED_OK = b"2\r\nok\r\n0\r\n\r\n"
HOSTILE = {
    "status-999": b"HTTP/1.1 999 Weird\r\ncontent-length: 2\r\n\r\nok",
    "status-600": b"HTTP/1.1 600 Past\r\ncontent-length: 2\r\n\r\nok",
    "status-099": b"HTTP/1.1 099 Before\r\ncontent-length: 2\r\n\r\nok",
    "gzip-chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n" + CHUNKED_OK,
    "chunked-gzip": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\nok",
    "xchunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: xchunked\r\n\r\nok",
    "unknown-coding": b"HTTP/1.1 200 OK\r\ntransfer-encoding: br\r\n\r\nok",
    "chunked-twice": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n"
        + CHUNKED_OK
    ),
    "length-and-chunked": (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n" + CHUNKED_OK
    ),
    "switching-protocols": (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\nxx"
    ),
    "long-reason": b"HTTP/1.1 200 " + b"r" * 100_000 + b"\r\ncontent-length: 2\r\n\r\nok",
}


def respond(request: RawRequest) -> Reply:
    name = request.target.rsplit(b"/", 1)[1].decode()
    if name in HOSTILE:
        return Reply(HOSTILE[name], close=True)
    return Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with RawUpstream(respond) as upstream:
        log = tmp_path_factory.mktemp("proxy") / "proxy.log"
        started = ProxyProcess(["--upstream", upstream.url], proxy_env(None), log)
        try:
            yield started.wait_ready()
        finally:
            started.stop()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_answer_is_a_502_recorded_as_protocol(proxy: ProxyProcess, case: str) -> None:
    rid = f"hostile-{case}"
    r = httpx.get(f"{proxy.url}/hostile/{case}", headers={"x-request-id": rid}, timeout=10)
    assert (r.status_code, r.json()["error"]["type"]) == (502, "BadGateway")
    (line,) = proxy.request_logs(rid)
    assert (line["status"], line["outcome"], line["error_type"]) == (
        502,
        "upstream_error",
        "protocol",
    )
    # the proxy still serves, and nothing escaped its error handling
    assert httpx.get(proxy.url + "/fine", timeout=10).content == b"ok"
    output = proxy.output()
    for escaped in ("Traceback", "Fatal error", "unhandled error", "KeyError"):
        assert escaped not in output
