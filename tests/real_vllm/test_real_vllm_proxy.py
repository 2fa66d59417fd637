"""The proxy in front of real vLLM: transparent events, true token counts, one request id,
one trace, and aborts that reach the engine."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import httpx
import orjson
import pytest

from latency_proxy.measure.sse import SSEParser
from tests.real_vllm.conftest import MAX_MODEL_LEN, MODEL, VLLMServer
from tests.support.otlp_receiver import OTLPReceiver, ReceivedSpan
from tests.support.proxy import ProxyProcess

# the first test also waits for the session fixtures: the tiny model and vLLM's start
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

USAGE = {"include_usage": True}
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ID_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-"}
MAX_TOKENS = 24
STALL_S = 2.0  # vLLM's API server slower than this to answer /health is stalled


def request_body(endpoint: str, max_tokens: int = MAX_TOKENS, **extra: Any) -> dict[str, Any]:
    """Greedy and seeded, so two calls with the same request id produce the same events."""
    prompt: dict[str, Any] = (
        {"messages": [{"role": "user", "content": "count the brown foxes"}]}
        if endpoint == "chat"
        else {"prompt": "count the brown foxes"}
    )
    return {
        "model": MODEL,
        **prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "seed": 7,
        **extra,
    }


def post(url: str, endpoint: str, body: dict[str, Any], request_id: str) -> httpx.Response:
    headers = {"X-Request-ID": request_id}
    return httpx.post(url + PATHS[endpoint], json=body, headers=headers, timeout=120)


def events(response: httpx.Response) -> list[Any]:
    """The parsed events of a stream (or the one body), minus `created` (a clock reading)."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        parsed = [response.json()]
    else:
        parsed = [
            "[DONE]" if e.data == b"[DONE]" else orjson.loads(e.data)
            for e in SSEParser().feed(response.content)
            if e.data is not None
        ]
    return [
        e if isinstance(e, str) else {k: v for k, v in e.items() if k != "created"} for e in parsed
    ]


class Case(NamedTuple):
    """One way of asking: the endpoint, streamed or not, and the stream options."""

    endpoint: str
    stream: bool
    options: dict[str, bool] | None


CASES = [
    pytest.param(Case(endpoint, stream, options), id=f"{endpoint}-{label}")
    for endpoint in ("chat", "completions")
    for stream, options, label in (
        (False, None, "json"),
        (True, None, "stream"),
        (True, USAGE, "usage"),
        (True, CONTINUOUS, "continuous"),
    )
]


def through_both(
    vllm: VLLMServer,
    proxy: ProxyProcess,
    tag: str,
    case: Case,
) -> tuple[str, httpx.Response, httpx.Response, float]:
    """The same request, same request id, to vLLM and then through the proxy; returns the id,
    both responses and how many tokens vLLM generated for the proxied one."""
    endpoint, stream, options = case
    extra: dict[str, Any] = {"stream": stream}
    if options:
        extra["stream_options"] = options
    body = request_body(endpoint, **extra)
    request_id = f"rv-{tag}-{endpoint}-{'stream' if stream else 'json'}-{len(options or {})}"
    direct = post(vllm.url, endpoint, body, request_id)
    before = vllm.settled_metric("vllm:generation_tokens_total")
    proxied = post(proxy.url, endpoint, body, request_id)
    generated = vllm.settled_metric("vllm:generation_tokens_total") - before
    assert direct.status_code == proxied.status_code == 200, proxied.text
    return request_id, direct, proxied, generated


@pytest.mark.parametrize("case", CASES)
def test_client_sees_exactly_vllms_events(
    vllm: VLLMServer, vllm_proxy: ProxyProcess, case: Case
) -> None:
    _, direct, proxied, _ = through_both(vllm, vllm_proxy, "events", case)
    assert events(proxied) == events(direct)


@pytest.mark.parametrize("case", CASES)
def test_one_request_id_and_one_token_count(
    vllm: VLLMServer, vllm_proxy: ProxyProcess, case: Case
) -> None:
    request_id, _, proxied, generated = through_both(vllm, vllm_proxy, "count", case)
    # the client's request id is vLLM's: echoed header, body id
    assert proxied.headers["x-request-id"] == request_id
    assert events(proxied)[0]["id"] == ID_PREFIX[case.endpoint] + request_id
    # one count of output tokens: the proxy's log, vLLM's usage, vLLM's own counter
    usage = [e["usage"] for e in events(proxied) if isinstance(e, dict) and e.get("usage")]
    if usage:
        assert usage[-1]["completion_tokens"] == generated
    (line,) = vllm_proxy.request_logs(request_id)
    assert line["output_tokens"] == generated == MAX_TOKENS
    assert line["outcome"] == "ok"


def test_tokens_come_from_usage_when_chunks_carry_no_text(
    vllm: VLLMServer, vllm_proxy: ProxyProcess
) -> None:
    """The tiny model's byte-level tokens often end mid-character: vLLM then sends a chunk with
    empty text and still counts the token. Counting content events would come out short."""
    request_id = "rv-partial-utf8"
    before = vllm.settled_metric("vllm:generation_tokens_total")
    response = post(vllm_proxy.url, "chat", request_body("chat", stream=True), request_id)
    generated = vllm.settled_metric("vllm:generation_tokens_total") - before
    deltas = [
        e["choices"][0]["delta"]
        for e in events(response)
        if isinstance(e, dict) and e["choices"] and "role" not in e["choices"][0]["delta"]
    ]
    with_text = [d for d in deltas if d.get("content")]
    assert len(deltas) == MAX_TOKENS > len(with_text)  # one chunk per token, some empty
    (line,) = vllm_proxy.request_logs(request_id)
    assert line["output_tokens"] == generated == MAX_TOKENS


def client_and_vllm_spans(spans: list[ReceivedSpan], request_id: str) -> tuple[Any, Any]:
    client = next(
        (
            s
            for s in spans
            if s.kind == "CLIENT" and s.attributes.get("latency_proxy.request_id") == request_id
        ),
        None,
    )
    engine = next(
        (s for s in spans if client and s.name == "llm_request" and s.trace_id == client.trace_id),
        None,
    )
    return client, engine


def test_vllm_span_lands_under_the_proxys_client_span(
    vllm_proxy: ProxyProcess, otlp: OTLPReceiver
) -> None:
    request_id = "rv-trace-1"
    response = post(
        vllm_proxy.url, "chat", request_body("chat", max_tokens=8, stream=True), request_id
    )
    assert response.status_code == 200

    spans = otlp.wait_for_spans(lambda s: all(client_and_vllm_spans(s, request_id)), timeout=30)
    client, engine = client_and_vllm_spans(spans, request_id)
    assert client is not None and engine is not None, [s.name for s in spans]
    server = next(s for s in spans if s.span_id == client.parent_span_id)
    assert server.kind == "SERVER" and server.resource.get("service.name") == "latency-proxy-test"
    assert engine.parent_span_id == client.span_id
    assert engine.resource.get("service.name") == "vllm"
    assert engine.attributes["gen_ai.request.id"] == ID_PREFIX["chat"] + request_id
    assert engine.attributes["gen_ai.usage.completion_tokens"] == 8
    assert "gen_ai.latency.time_to_first_token" in engine.attributes
    assert "gen_ai.latency.time_in_queue" in engine.attributes


def hang_up_after_three_events(url: str, request_id: str, body: dict[str, Any]) -> float:
    """Stream a request, read its first three events, close the connection; returns how
    long that took."""
    t0 = time.monotonic()
    headers = {"X-Request-ID": request_id}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        parser, seen = SSEParser(), 0
        for chunk in response.iter_bytes():
            seen += len(parser.feed(chunk))
            if seen >= 3:
                break
    return time.monotonic() - t0


def vllm_answer_time(vllm: VLLMServer) -> float:
    """Seconds vLLM's API server takes to answer /health: how long it is stalled right now."""
    t0 = time.monotonic()
    httpx.get(vllm.url + "/health", timeout=120)
    return time.monotonic() - t0


def test_client_disconnect_aborts_the_request_in_vllm(
    vllm: VLLMServer, vllm_proxy: ProxyProcess
) -> None:
    """vLLM 0.32 counts no aborted request in request_success_total{finished_reason="abort"}
    (it stays 0 for disconnects made directly too), so an abort shows as a request that
    leaves the engine without finishing: nothing running, no finished request added, and
    far fewer tokens generated than asked for.

    On two cores vLLM's engine can starve its own API server (and the proxy and this client)
    for seconds, while it keeps generating. The answer asked for takes the tiny model well
    over ten seconds, and an attempt counts only if the client hung up within three.

    It failed about one run in ten, the likeliest cause being that stall: the proxy ends the
    exchange (and closes vLLM's connection) at the hang-up, but a stalled API server sees the
    disconnect only after the engine has finished the answer. So each side is checked on its
    own. The proxy's part fails the test whenever it is late, unless its own loop lag
    (loop_lag_max_s, STALL_S or more) says the engine starved its process too. vLLM's is
    judged against how long its API server took to answer /health right after the hang-up: a
    whole answer behind a stalled API server (STALL_S or more) is vLLM's own stall. A stalled
    attempt is retried, and when every attempt stalled the test is xfailed, saying so,
    rather than failing the run. A whole answer from an API server that answered at once is
    a lost abort, and fails."""
    max_tokens = MAX_MODEL_LEN - 64
    body = request_body("completions", max_tokens=max_tokens, stream=True)
    stalls = []
    for attempt in range(3):
        request_id = f"rv-abort-{attempt}"
        finished = vllm.settled_metric("vllm:request_success_total")
        generated = vllm.settled_metric("vllm:generation_tokens_total")
        took = hang_up_after_three_events(vllm_proxy.url + PATHS["completions"], request_id, body)
        stall = vllm_answer_time(vllm)
        deadline = time.monotonic() + 60
        while vllm.metric("vllm:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.1)
        if took >= 3.0:
            continue
        (line,) = vllm_proxy.request_logs(request_id)
        assert line["outcome"] == "client_abort"
        if line["loop_lag_max_s"] >= STALL_S:  # the engine starved the proxy's process too
            stalls.append(f"the proxy's loop {line['loop_lag_max_s']:.1f} s")
            continue
        # the proxy's part: it ended the exchange (and closed vLLM's connection) at the hang-up
        assert line["e2e_s"] < took + 2.0, f"the proxy noticed the hang-up late: {line}"
        tokens = vllm.settled_metric("vllm:generation_tokens_total") - generated
        succeeded = vllm.settled_metric("vllm:request_success_total") - finished
        whole = tokens >= max_tokens or succeeded > 0
        if not whole:
            break
        assert stall >= STALL_S, (
            f"vLLM generated the whole answer though its API server answered /health in "
            f"{stall:.2f} s after the hang-up: the abort did not reach it: {line}"
        )
        stalls.append(f"vLLM's API server {stall:.1f} s")
    else:
        if stalls:
            pytest.xfail(
                f"every attempt stalled on the shared CPU ({', '.join(stalls)}): vLLM's API "
                "server answering /health after the hang-up while the engine finished the "
                "answer, or the proxy's own event loop held as long (its loop_lag_max_s)"
            )
        pytest.fail(f"the client needed over 3 s to read 3 events, 3 times (last {took:.1f} s)")
    assert vllm.metric("vllm:num_requests_running") == 0
    assert vllm.settled_metric("vllm:request_success_total") == finished
