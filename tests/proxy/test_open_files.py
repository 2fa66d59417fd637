"""The proxy's own file descriptors: the soft limit raised at start, and running out of
them recorded as the proxy's failure (never the upstream's), logged once per burst."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx

from tests.support.proxy import ProxyProcess

LIMIT = 128


def open_files(proxy: ProxyProcess) -> int:
    return len(os.listdir(f"/proc/{proxy.process.pid}/fd"))


def fill(proxy: ProxyProcess) -> list[socket.socket]:
    """Idle client connections until the proxy holds every file descriptor it may."""
    held: list[socket.socket] = []
    deadline = time.monotonic() + 5
    while open_files(proxy) < LIMIT and time.monotonic() < deadline:
        held.append(socket.create_connection(("127.0.0.1", proxy.port)))
        time.sleep(0.005)
    assert open_files(proxy) == LIMIT
    return held


def model_call(client: httpx.Client, proxy: ProxyProcess, model: str = "m") -> httpx.Response:
    return client.post(proxy.url + "/v1/completions", json={"model": model, "prompt": "x"})


def test_running_out_of_file_descriptors_is_the_proxys_own_error(start_proxy, upstream) -> None:
    # the default route's pool stays empty: its calls need a new connection, so a new fd
    routes = ["--upstream", upstream.url, "--upstream", f"warm={upstream.url}"]
    proxy = start_proxy(*routes, open_files=(LIMIT, LIMIT))
    with httpx.Client(timeout=10) as client:
        assert model_call(client, proxy, "warm").status_code == 200  # the client's connection
        held = fill(proxy)
        answers = [model_call(client, proxy) for _ in range(3)]
        for sock in held:
            sock.close()
        time.sleep(0.2)
        recovered = model_call(client, proxy)
    assert [a.status_code for a in answers] == [503, 503, 503]
    assert recovered.status_code == 200
    lines = proxy.log_lines()
    failed = [line for line in lines if line.get("outcome") == "proxy_error"]
    assert [line.get("error_type") for line in failed] == ["fd_limit"] * 3
    (said,) = [line for line in lines if "out of file descriptors" in line["msg"]]  # once
    assert f"open files {LIMIT}" in said["msg"]
    metrics = proxy.metrics()
    assert "latency_proxy_upstream_errors_total{" not in metrics


def test_the_soft_limit_is_raised_to_the_hard_one_at_start(start_proxy, upstream) -> None:
    proxy = start_proxy("--upstream", upstream.url, open_files=(256, 512))
    (listening,) = [line for line in proxy.log_lines() if line["msg"] == "listening"]
    assert (listening["open_files_limit"], listening["open_files_limit_raised_from"]) == (512, 256)
    limits = Path(f"/proc/{proxy.process.pid}/limits").read_text()
    assert [line.split()[3:5] for line in limits.splitlines() if "open files" in line] == [
        ["512", "512"]
    ]
