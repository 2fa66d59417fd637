"""Failure injection (loadgen/sim/wire/faults.py): the syntax, the seeded draw, and each fault as a
client sees it on a real server, in fixed mode and with a preset."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from latency_proxy.measure.sse import SSEParser
from loadgen.sim.wire.app import create_app
from loadgen.sim.wire.faults import Injector, Rule, parse
from loadgen.stack.processes import free_port
from tests.sim.test_cli import sim
from tests.support.scripted_upstream import ServerThread

CHAT = {"messages": [{"role": "user", "content": "a b c"}], "max_tokens": 6, "ignore_eos": True}
STREAM = {**CHAT, "stream": True}


@contextlib.contextmanager
def faulty(*rules: str, preset: str | None = None, itl: float = 0.0) -> Iterator[str]:
    timing = {} if preset else {"ttft": 0.0, "itl": itl}
    app = create_app(preset, faults=[parse(r) for r in rules], **timing)
    port = free_port()
    with ServerThread(app, port):
        yield f"http://127.0.0.1:{port}"


def raw_stream(url: str, fault: str) -> tuple[bytes, str]:
    """POST a streamed chat over a raw socket; (every byte received, how it ended: "eof",
    "reset" or "complete" for the terminating chunk of a chunked body)."""
    body = json.dumps(STREAM).encode()
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-fault: %s\r\ncontent-length: %d\r\n\r\n%s" % (fault.encode(), len(body), body)
        )
        received = b""
        while not received.endswith(b"\r\n0\r\n\r\n"):
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                return received, "reset"
            if not data:
                return received, "eof"
            received += data
        return received, "complete"


def events(raw: bytes) -> list[bytes]:
    """The SSE events of a raw chunked response, as far as it got."""
    rest, body = raw.split(b"\r\n\r\n", 1)[1], b""
    while b"\r\n" in rest:
        size, rest = rest.split(b"\r\n", 1)
        body, rest = body + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
    return [e.raw.strip() for e in SSEParser().feed(body)]


def content(event: bytes) -> bool:
    return b'"delta":{"content"' in event


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("error=0.05", Rule("error", 0.05)),
        ("error=0.02:429", Rule("error", 0.02, status=429)),
        ("spike=0.1:250ms", Rule("spike", 0.1, duration=0.25)),
        ("cut=0.02@40", Rule("cut", 0.02, after=40)),
        ("reset=0.01", Rule("reset", 0.01)),
        ("stall=0.01@5:2s", Rule("stall", 0.01, after=5, duration=2.0)),
        ("malformed=0.01@3:shape", Rule("malformed", 0.01, after=3, malformed="shape")),
        ("restart=0.001:5s", Rule("restart", 0.001, duration=5.0)),
    ],
)
def test_the_syntax(text: str, rule: Rule) -> None:
    assert parse(text) == rule
    header = text.split("=")[0] + text.split("=")[1].lstrip("0123456789.")
    assert parse(header, rated=False) == Rule(rule.kind, 1.0, rule.after, rule.status,
                                              rule.duration, rule.malformed)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("oops=0.1", "KIND one of"),
        ("cut", "give a rate"),
        ("error=1.5", "probability"),
        ("error=0.1@3", "has no @N"),
        ("spike=0.1", "needs :DURATION"),
        ("error=0.1:200", "400-599"),
        ("malformed=0.1:binary", "text or shape"),
        ("cut=0.1:x", "takes no :ARG"),
    ],
)
def test_bad_faults_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse(text)
    run = sim("--ttft", "0", "--itl", "0", "--fault", text)
    assert run.returncode == 2 and says in run.stderr


def test_the_draw_is_the_seeds_and_honours_the_rates() -> None:
    rules = [parse("error=0.1:503"), parse("cut=0.05@3"), parse("spike=0.2:1s")]

    def kinds(seed: int, headers: dict[int, str] = {}) -> list[str | None]:  # noqa: B006
        injector = Injector(rules, seed)
        drawn = [injector.draw(headers.get(i)) for i in range(10_000)]
        return [next(iter(fields), None) for fields in drawn]

    first = kinds(1)
    assert first == kinds(1) and first != kinds(2)
    shares = Counter(first)
    assert abs(shares["status"] / 10_000 - 0.1) < 0.01
    assert abs(shares["die_after"] / 10_000 - 0.05) < 0.01
    assert abs(shares["headers_delay"] / 10_000 - 0.2) < 0.015
    # a request's own fault takes its draw without shifting anyone else's
    overridden = kinds(1, {5: "reset@1"})
    assert overridden[5] == "die_after" and overridden[:5] + overridden[6:] == first[:5] + first[6:]
    with pytest.raises(ValueError, match="more than 1"):
        Injector([parse("error=0.6"), parse("cut=0.5")])


def test_errors_and_spikes() -> None:
    with faulty("error=0") as url:
        for status, retry in ((500, None), (503, "1"), (429, "1")):
            r = httpx.post(url + "/v1/chat/completions", json=CHAT,
                           headers={"x-fault": f"error:{status}"})  # fmt: skip
            assert r.status_code == status and r.headers.get("retry-after") == retry
            assert r.json()["error"]["code"] == status
        start = time.perf_counter()
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"x-fault": "spike:300ms"})
        assert r.status_code == 200 and time.perf_counter() - start >= 0.3
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"x-fault": "cut@1:x"})
        assert r.status_code == 400 and "bad fault" in r.json()["error"]["message"]


def test_a_cut_closes_and_a_reset_resets_after_n_chunks() -> None:
    with faulty("error=0") as url:
        cut, how = raw_stream(url, "cut@2")
        assert how == "eof" and b" 200 OK" in cut
        assert sum(map(content, events(cut))) == 2 and b"[DONE]" not in cut
        _, how = raw_stream(url, "reset@2")
        assert how == "reset"
        whole, how = raw_stream(url, "cut@99")  # a stream that ends first is not hurt
        assert how == "complete" and b"[DONE]" in whole


def test_a_stall_pauses_then_the_stream_goes_on() -> None:
    with faulty("error=0") as url:
        start = time.perf_counter()
        whole, how = raw_stream(url, "stall@2:400ms")
        assert how == "complete" and b"[DONE]" in whole
        assert time.perf_counter() - start >= 0.4


def test_a_malformed_event_comes_once_between_good_ones() -> None:
    with faulty("error=0") as url:
        for kind, data in (("text", b'data: {"choices": [{'), ("shape", b'data: {"choices": 1}')):
            whole, how = raw_stream(url, f"malformed@2:{kind}")
            got = events(whole)
            assert how == "complete" and got[-1] == b"data: [DONE]"
            (bad,) = [i for i, e in enumerate(got) if e.startswith(data)]
            assert bad == 3  # role, two content chunks, then the broken event
            assert sum(map(content, got[bad + 1 :])) == 4


def test_a_restart_cuts_what_is_in_flight_then_answers_503_for_a_while() -> None:
    with faulty("error=0", itl=0.05) as url, httpx.Client(timeout=10) as client:
        long = {**STREAM, "max_tokens": 200}
        with client.stream("POST", url + "/v1/chat/completions", json=long) as r:
            stream = r.iter_raw()
            assert b"role" in next(stream)
            restarted = client.post(url + "/v1/chat/completions", json=CHAT,
                                    headers={"x-fault": "restart:1s"})  # fmt: skip
            assert restarted.status_code == 503 and restarted.headers["retry-after"] == "1"
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in stream:
                    pass
        assert client.get(url + "/health").status_code == 503
        assert client.get(url + "/metrics").status_code == 200
        deadline = time.monotonic() + 5
        while client.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.post(url + "/v1/chat/completions", json=CHAT).status_code == 200


def test_faults_play_on_a_preset_and_free_its_batch_slots() -> None:
    preset = "llama-2-7b-bf16-h200"
    with faulty("cut=0.5@2", "error=0.5:503", preset=preset) as url:
        statuses = Counter()
        for _ in range(20):
            try:
                r = httpx.post(url + "/v1/chat/completions", json=STREAM, timeout=10)
                statuses[r.status_code] += 1
            except httpx.RemoteProtocolError:
                statuses["cut"] += 1
        assert statuses["cut"] > 0 and statuses[503] > 0 and statuses[200] == 0
        deadline = time.monotonic() + 5
        while running(url) != 0:  # every cut stream's batch slot comes back
            assert time.monotonic() < deadline
            time.sleep(0.05)


def running(url: str) -> float:
    (line,) = [
        line
        for line in httpx.get(url + "/metrics").text.splitlines()
        if line.startswith("vllm:num_requests_running{")
    ]
    return float(line.split()[-1])
