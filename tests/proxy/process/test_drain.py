"""SIGTERM: the process stops taking requests, says so on /readyz, lets the streams in
flight finish within --drain-timeout, cuts and records the ones that do not, and exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}


def stream_in_background(
    url: str, script: dict, request_id: str = ""
) -> tuple[threading.Thread, dict]:
    """A streaming request on its own thread (not started); its bytes or error land in the dict."""
    result: dict = {}
    headers = {"x-script": json.dumps(script)}
    if request_id:
        headers["x-request-id"] = request_id

    def stream() -> None:
        try:
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=BODY, timeout=20, headers=headers
            ) as r:
                result["raw"] = b"".join(r.iter_raw())
        except httpx.HTTPError as exc:
            result["error"] = exc

    return threading.Thread(target=stream), result


def wait_for_upstream(upstream, request_id: str) -> None:
    """Until the upstream has the request: then it is in flight at the proxy."""
    for _ in range(100):
        if any(r.headers.get("x-request-id") == request_id for r in upstream.received):
            return
        time.sleep(0.05)
    raise AssertionError(f"{request_id} never reached the upstream")


def test_sigterm_drains_in_flight_streams_then_exits_zero(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--drain-timeout", "10s")
    rid = "drain-" + uuid.uuid4().hex
    worker, result = stream_in_background(proxy.url, {"tokens": 20, "itl": 0.05}, rid)
    with httpx.Client(timeout=5) as admin:
        assert admin.get(proxy.admin + "/readyz").status_code == 200
        worker.start()
        wait_for_upstream(upstream, rid)
        proxy.process.send_signal(signal.SIGTERM)
        for _ in range(100):  # kept-alive connection, still answered: until it says so
            ready = admin.get(proxy.admin + "/readyz")
            if ready.status_code != 200:
                break
            time.sleep(0.02)
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
    for _ in range(100):  # uvicorn closes the listener on its next tick after the signal
        try:
            httpx.get(proxy.url + "/health", timeout=2)
        except httpx.ConnectError:
            break  # no longer accepting
        except httpx.RemoteProtocolError:
            pass  # accepted just as the listener closed, then dropped unanswered
        time.sleep(0.02)
    else:
        raise AssertionError("the main port still accepts connections while draining")
    worker.join(15)
    assert result["raw"].count(b'"content":"tok ') == 20 and b"[DONE]" in result["raw"]
    assert proxy.process.wait(15) == 0


def test_stream_longer_than_the_drain_is_cut_and_still_recorded(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, "--drain-timeout", "500ms")
    rid = "cut-" + uuid.uuid4().hex
    worker, _ = stream_in_background(proxy.url, {"tokens": 100, "itl": 0.05}, rid)
    worker.start()
    wait_for_upstream(upstream, rid)
    t = time.perf_counter()
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(15) == 0
    assert time.perf_counter() - t < 5
    worker.join(10)
    (line,) = proxy.request_logs(rid)
    assert (line["outcome"], line["error_type"]) == ("proxy_error", "shutdown")
    assert 0 < line["chunks"] < 100
    assert line["level"] == "warning"  # its one line; uvicorn's traceback of the cut is not
    assert "Exception in ASGI application" not in proxy.output()


def test_sigterm_right_after_the_start_line_drains_and_exits_zero(tmp_path) -> None:
    """A signal between the start line and uvicorn's own handlers is acted on once the
    server has started, not lost (the proxy would otherwise run on after SIGTERM)."""
    code = (
        "import os, signal, sys\n"
        "from latency_proxy import cli\n"
        "from latency_proxy.process import serving\n"
        "started = serving.log_listening\n"
        "def listening(*args):\n"
        "    started(*args)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "serving.log_listening = listening\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    flags = ["--upstream", "http://127.0.0.1:9", "--port", "0", "--admin-port", "0"]
    done = subprocess.run(
        [sys.executable, "-c", code, *flags], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"msg":"draining"' in done.stdout  # its log lines
