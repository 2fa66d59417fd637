"""A finished request leaves no loop of references behind: its objects go when their last
reference does, not at the garbage collector's next pass (server/http_protocol.py). A loop
per request would make the collector's passes scan every finished request, and its full
passes, which stop the event loop, grow with the traffic."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.proxy import proxy_env

# Every loop the collector finds is kept in gc.garbage instead of freed (DEBUG_SAVEALL), so
# none escapes the count; on SIGUSR1 the proxy writes the kept objects' types, whole or not
# at all (renamed into place), so the test never reads a file half written.
PROBE = """\
import collections, gc, json, os, signal
gc.set_debug(gc.DEBUG_SAVEALL)
def _count(*_):
    gc.collect()
    kinds = collections.Counter(type(o).__name__ for o in gc.garbage)
    path = os.environ["GARBAGE_OUT"]
    with open(path + ".part", "w") as out:
        json.dump(kinds, out)
    os.replace(path + ".part", path)
signal.signal(signal.SIGUSR1, _count)
"""
REQUESTS = 40


def _kept(proxy, out: Path) -> dict[str, int]:
    proxy.process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads(out.read_text())


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "json"])
def test_finished_requests_leave_no_loops_for_the_collector(
    start_proxy, upstream, tmp_path: Path, stream: bool
) -> None:
    (tmp_path / "sitecustomize.py").write_text(PROBE)
    out = tmp_path / "garbage.json"
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = proxy_env(None, PYTHONPATH=path, GARBAGE_OUT=str(out))
    proxy = start_proxy("--upstream", upstream.url, env=env)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    with httpx.Client(base_url=proxy.url, timeout=10) as client:  # one kept-alive connection
        for _ in range(REQUESTS):
            response = client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200
        kept = _kept(proxy, out)
    # connections that closed (the readiness probes') each leave their own loop; requests
    # on the open connection must leave none
    assert kept.get("RequestResponseCycle", 0) < REQUESTS // 4, kept
