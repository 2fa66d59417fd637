"""Spans through a real OTLP receiver, trace propagation, the metrics text and exemplars."""

from __future__ import annotations

import json
import re
import time
import uuid

import httpx

from latency_proxy.forwarding.models_list import LISTING_RETRY
from loadgen.sim.wire.app import create_app
from loadgen.stack.processes import free_port
from tests.support.proxy import proxy_env, read_raw
from tests.support.scripted_upstream import MODEL, PROXY_SCRIPT, ServerThread
from tests.support.timing import LATE, on_time, wall_clock

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def spans_of(otlp, rid: str, count: int = 2):
    return otlp.wait_for_spans(
        lambda spans: (
            len([s for s in spans if s.attributes.get("latency_proxy.request_id") == rid]) >= count
        ),
        timeout=10,
    )


@wall_clock
def test_server_and_client_spans_continue_the_incoming_trace(proxy, upstream, otlp) -> None:
    rid = "span-" + uuid.uuid4().hex
    headers = {
        "x-request-id": rid,
        "traceparent": f"00-{TRACE_ID}-{PARENT}-01",
        "tracestate": "vendor=1",
        "x-script": json.dumps({"ttft": 0.2, "itl": 0.05, "tokens": 5}),
    }
    body = {
        "model": MODEL,  # what the upstream lists: a name it did not is recorded `other`
        "stream": True,
        "max_tokens": 5,
        "temperature": 0,
        "messages": [{"role": "user", "content": "x"}],
    }
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json=body, headers=headers, timeout=10
    ) as r:
        b"".join(r.iter_raw())
    spans = [s for s in spans_of(otlp, rid) if s.attributes.get("latency_proxy.request_id") == rid]
    server = next(s for s in spans if s.kind == "SERVER")
    client = next(s for s in spans if s.kind == "CLIENT")
    assert server.name == "POST /v1/chat/completions"
    assert server.trace_id == TRACE_ID and server.parent_span_id == PARENT
    assert client.name == f"chat {MODEL}"
    assert client.trace_id == TRACE_ID and client.parent_span_id == server.span_id
    a = client.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "vllm"
    assert a["gen_ai.request.model"] == MODEL and a["gen_ai.response.model"] == MODEL
    assert a["gen_ai.request.max_tokens"] == 5 and a["gen_ai.request.temperature"] == 0.0
    assert a["gen_ai.usage.input_tokens"] == 7 and a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    assert a["gen_ai.response.id"] == "chatcmpl-" + rid
    assert a["server.address"] == "127.0.0.1"
    assert on_time(a["latency_proxy.ttft_s"], 0.2)
    assert on_time(a["latency_proxy.tpot_s"] * 4, 4 * 0.05)
    assert a["latency_proxy.ttfnt_n"] == [3]
    assert on_time(a["latency_proxy.ttfnt_s"][0], 0.2 + 2 * 0.05)
    assert a["latency_proxy.chunks"] == 5
    assert [name for name, _ in client.events] == ["gen_ai.first_token"]
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["latency_proxy.overhead.request_s"] < LATE  # ≪ the 0.4 s upstream
    assert 0 <= server.attributes["latency_proxy.event_loop.lag_max_s"] < LATE
    assert server.status_code != "ERROR" and client.status_code != "ERROR"
    # the upstream got the CLIENT span's context, so vLLM's own span lands under it
    sent = next(r for r in upstream.received if r.headers.get("x-request-id") == rid)
    assert sent.headers["traceparent"] == f"00-{TRACE_ID}-{client.span_id}-01"
    assert sent.headers["tracestate"] == "vendor=1"
    assert server.resource["service.name"] == "latency-proxy-test"


def scripted_completion(proxy, prefix: str, tokens: int, model: str = MODEL) -> str:
    """One streaming completion of `tokens` scripted tokens through the proxy; its request id."""
    rid = f"{prefix}-{uuid.uuid4().hex}"
    httpx.post(
        proxy.url + "/v1/completions",
        json={"model": model, "prompt": "x", "stream": True},
        headers={"x-request-id": rid, "x-script": json.dumps({"tokens": tokens})},
        timeout=10,
    )
    return rid


def test_metrics_text_has_every_instrument(proxy) -> None:
    scripted_completion(proxy, "all", tokens=3)
    text = proxy.metrics()
    for name in [
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "gen_ai_server_time_per_output_token_seconds_bucket",
        "gen_ai_server_request_duration_seconds_bucket",
        "gen_ai_client_token_usage_bucket",
        "gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
        "gen_ai_client_operation_time_per_output_chunk_seconds_bucket",
        "latency_proxy_time_to_first_n_tokens_seconds_bucket",
        "latency_proxy_overhead_seconds_bucket",
        "latency_proxy_requests_total",
        "latency_proxy_requests_active",
        "# HELP latency_proxy_tokens_per_chunk",
        "# HELP latency_proxy_upstream_errors_total",
        "# HELP latency_proxy_telemetry_dropped_total",
    ]:
        assert name in text, name
    assert 'gen_ai_token_type="output"' in text and 'phase="request"' in text
    assert 'phase="event"' in text


def test_openmetrics_exemplars_carry_trace_ids(start_proxy, upstream, otlp) -> None:
    proxy = start_proxy("--upstream", upstream.url, env=proxy_env(otlp))  # its one request
    rid = scripted_completion(proxy, "ex", tokens=2)
    server = next(
        s
        for s in spans_of(otlp, rid)
        if s.kind == "SERVER" and s.attributes["latency_proxy.request_id"] == rid
    )
    r = httpx.get(proxy.admin + "/metrics", headers={"Accept": "application/openmetrics-text"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    ttft = [
        line
        for line in r.text.splitlines()
        if line.startswith("gen_ai_server_time_to_first_token_seconds_bucket")
        and f'gen_ai_request_model="{MODEL}"' in line
        and "#" in line
    ]
    assert ttft and all(f'trace_id="{server.trace_id}"' in line for line in ttft)
    assert r.text.rstrip().endswith("# EOF")
    plain = httpx.get(proxy.admin + "/metrics").text
    assert "trace_id" not in plain


def test_a_trace_the_sampler_drops_leaves_no_exemplar(start_proxy, upstream, otlp) -> None:
    env = proxy_env(otlp, OTEL_TRACES_SAMPLER="always_off")
    proxy = start_proxy("--upstream", upstream.url, env=env)
    rid = scripted_completion(proxy, "unsampled", tokens=2)
    assert len(proxy.request_logs(rid)) == 1  # recorded, before looking for what is absent
    r = httpx.get(proxy.admin + "/metrics", headers={"Accept": "application/openmetrics-text"})
    ttft = [
        line
        for line in r.text.splitlines()
        if line.startswith("gen_ai_server_time_to_first_token_seconds_count")
    ]
    assert ttft and float(ttft[0].rsplit(" ", 1)[1]) >= 1  # measured all the same
    assert "trace_id=" not in r.text


def test_invented_model_names_never_take_the_labels(start_proxy, upstream) -> None:
    # the scripted upstream answers 200 to any model name; it lists only MODEL
    started = time.time()
    proxy = start_proxy("--upstream", upstream.url)
    with httpx.Client(timeout=10) as client:
        for i in range(40):
            client.post(proxy.url + "/v1/completions", json={"model": f"m{i}", "prompt": "x"})
        client.post(proxy.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    models = re.findall(
        r'latency_proxy_requests_total\{[^}]*gen_ai_request_model="([^"]+)"', proxy.metrics()
    )
    # learned at start, before any client: no invented name was ever recorded
    assert sorted(models) == sorted(["other", MODEL])
    assert any(r.path == "/v1/models" and r.at > started for r in upstream.received)


def test_labels_are_learned_once_a_late_upstream_comes_up(start_proxy) -> None:
    port = free_port()
    proxy = start_proxy("--upstream", f"http://127.0.0.1:{port}")  # nothing listens yet
    time.sleep(0.5)  # the listing at start has failed
    app = create_app(ttft=0.0, itl=0.0, served_model_name=MODEL, script=PROXY_SCRIPT)
    with ServerThread(app, port):  # up now, and it answers any model name
        time.sleep(LISTING_RETRY + 1.5)  # the retry after the failed listing
        with httpx.Client(timeout=10) as client:
            client.post(proxy.url + "/v1/completions", json={"model": "late", "prompt": "x"})
            client.post(proxy.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    models = re.findall(
        r'latency_proxy_requests_total\{[^}]*gen_ai_request_model="([^"]+)"', proxy.metrics()
    )
    assert sorted(models) == sorted(["other", MODEL])  # unlisted `late` did not take a label


def test_every_request_yields_one_server_span_and_one_count(start_proxy, upstream, otlp) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--max-body-size", "1000", env=proxy_env(otlp))
    cases = [
        ({"model": "m", "prompt": "x", "stream": True}, {"tokens": 2}),  # ok
        ({"model": "m", "prompt": "x"}, {"status": 500}),  # upstream 5xx
        ({"model": "m", "prompt": "x"}, {"status": 400}),  # upstream 4xx
        ({"model": "m", "prompt": "x", "stream": True}, {"tokens": 4, "die_after": 2}),
        ({"model": "m", "prompt": "x" * 2000}, {}),  # 413
    ]
    rids = []
    with httpx.Client(timeout=10) as client:
        for body, script in cases:
            rid = "one-" + uuid.uuid4().hex
            rids.append(rid)
            headers = {"x-request-id": rid, "x-script": json.dumps(script)}
            url = proxy.url + "/v1/completions"
            with client.stream("POST", url, json=body, headers=headers) as r:
                assert read_raw(r)[1] == ("die_after" in script)  # a dying upstream's is cut
    for rid in rids:  # recorded (the log line is written last) before counting spans
        assert proxy.request_logs(rid)
    spans = otlp.wait_for_spans(
        lambda s: all(
            any(x.attributes.get("latency_proxy.request_id") == rid for x in s) for rid in rids
        )
    )
    for rid in rids:
        server = [
            s
            for s in spans
            if s.kind == "SERVER" and s.attributes.get("latency_proxy.request_id") == rid
        ]
        assert len(server) == 1, rid
        assert len(proxy.request_logs(rid)) == 1
    counts = re.findall(r"latency_proxy_requests_total\{[^}]*\} (\S+)", proxy.metrics())
    assert sum(float(c) for c in counts) == len(cases)
    statuses = {
        s.attributes["http.response.status_code"]: s.status_code
        for s in spans
        if s.kind == "SERVER" and s.attributes.get("latency_proxy.request_id") in rids
    }
    assert statuses[500] == "ERROR" and statuses[400] != "ERROR" and statuses[413] != "ERROR"


@wall_clock
def test_collector_down_requests_flow_and_drops_are_counted(start_proxy, upstream) -> None:
    from tests.support.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as dead:
        dead.set_failing(True)
        proxy = start_proxy(
            "--upstream", upstream.url, env=proxy_env(dead, OTEL_EXPORTER_OTLP_TIMEOUT="1")
        )
        with httpx.Client(timeout=10) as client:
            for _ in range(5):
                r = client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "x"})
                assert r.status_code == 200
        deadline = time.monotonic() + 15
        dropped = 0.0
        while time.monotonic() < deadline and dropped == 0:
            match = re.search(
                r'latency_proxy_telemetry_dropped_total\{error_type="\w+",signal="traces"\} (\S+)',
                proxy.metrics(),
            )
            dropped = float(match.group(1)) if match else 0.0
            time.sleep(0.2)
        assert dropped >= 1
        assert dead.request_count >= 1


def test_otlp_grpc_export_carries_spans_and_metrics(start_proxy, upstream) -> None:
    from tests.support.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as rx:
        env = proxy_env(
            None, OTEL_EXPORTER_OTLP_ENDPOINT=rx.grpc_endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
        )
        proxy = start_proxy("--upstream", upstream.url, env=env)
        rid = scripted_completion(proxy, "grpc", tokens=3)
        spans = spans_of(rx, rid)
        assert {s.kind for s in spans if s.attributes.get("latency_proxy.request_id") == rid} == {
            "SERVER",
            "CLIENT",
        }
        points = rx.wait_for_metrics(
            lambda ms: any(m.name == "gen_ai.server.time_to_first_token" for m in ms), timeout=10
        )
        ttft = [m for m in points if m.name == "gen_ai.server.time_to_first_token"]
        assert ttft[-1].attributes["gen_ai.request.model"] == MODEL
        assert ttft[-1].count >= 1
        assert ttft[-1].explicit_bounds[:3] == (0.001, 0.0015, 0.00225)  # our buckets
        client = next(
            s
            for s in spans
            if s.kind == "CLIENT" and s.attributes.get("latency_proxy.request_id") == rid
        )
        assert any(e.trace_id == client.trace_id for e in ttft[-1].exemplars)
