"""Chaos: loadgen through the proxy against a simulated vLLM that fails on purpose
(loadgen.sim --fault). Whatever the upstream does, every request loadgen made is recorded
once on each side, both sides name the failure alike, nothing outlives its timeout, and the
run's summary counts every kind of failure.

The run is short for the default suite (~15 s); the README quotes the same check for a
minute (`CHAOS_SECONDS=60`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loadgen.analysis.records import UNFINISHED
from loadgen.engine.window import COOLDOWN
from loadgen.sim.wire.script import GENERATION_PATHS
from loadgen.stack.processes import simulator
from tests.support import ROOT

SECONDS = float(os.environ.get("CHAOS_SECONDS", "10"))
TIMEOUT_S = 8.0  # loadgen's per-request timeout; the proxy's read timeout is shorter
FAULTS = [
    "error=0.05:503",
    "error=0.04:429",
    "error=0.03:500",
    "spike=0.04:300ms",
    "cut=0.05@6",
    "reset=0.04@3",
    "stall=0.04@5:600ms",
    "malformed=0.03@2:text",
    "malformed=0.03@4:shape",
    "restart=0.002:300ms",
]
# a broken stream, as loadgen sees it: the connection broke (aiohttp's exceptions: the proxy
# closes a client's connection without the body's last chunk when its upstream broke), or a
# stream ended before the answer was done ("truncated", "no_output")
BROKEN = {"ClientPayloadError", "ServerDisconnectedError", "ClientOSError"}
BROKEN |= {"truncated", "no_output"}


# a cooldown request loadgen ended as its run ended is, to the proxy, a client that went
# away (499, nginx's code, when it went before the answer began), or an answer it finished
# sending as loadgen let go
CUT_SHORT = {"client_abort", "http_499", "ok"}
# or whatever the upstream did as the run ended (a stream it broke, a status it answered):
# the proxy passed it on and loadgen let go before it read it, each side seeing its own end
# first; "as" is within this many seconds (a loaded box's loop turns included)
CROSSED_S = 0.5


def loadgen_kind(record: dict) -> str:
    """What went wrong, as loadgen's record says it."""
    error = record["error"]
    if error is None:
        return "ok"
    if error.startswith("http_"):
        return error
    return "broken" if error in BROKEN else error


def alike(record: dict, line: dict) -> bool:
    """Whether the two sides name one request's end alike."""
    loadgen_says, proxy_says = loadgen_kind(record), proxy_kind(line)
    if loadgen_says == UNFINISHED:
        crossed = abs(logged_at(line) - record["end_at"]) < CROSSED_S
        return proxy_says in CUT_SHORT or crossed
    return loadgen_says == proxy_says


def logged_at(line: dict) -> float:
    """A proxy line's `ts` (UTC, milliseconds) as epoch seconds, as records' times are."""
    stamp = datetime.strptime(line["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return stamp.timestamp()


def proxy_kind(line: dict) -> str:
    """What went wrong, as the proxy's log line says it."""
    if line["outcome"] == "ok" and line["status"] == 200:
        return "ok"
    if line["status"] != 200:  # the upstream's status, passed on
        return f"http_{line['status']}"
    return "broken" if line["outcome"] == "upstream_error" else line["outcome"]


def run_chaos(tmp_path: Path, start_proxy, faults: list[str]) -> tuple[list, list, dict, str]:
    """The records, the proxy's request lines, the summary and report.md of one chaos run."""
    sim_args = ["--preset", "llama-2-7b-bf16-h200", "--seed", "11"]
    sim_args += [arg for fault in faults for arg in ("--fault", fault)]
    with simulator(*sim_args, log=tmp_path / "sim.log") as upstream:
        proxy = start_proxy("--upstream", upstream, "--read-timeout", "4s")
        out = tmp_path / "run"
        command = [sys.executable, "-m", "loadgen", "--target", proxy.url, "--model", "llama-2-7b"]
        command += ["--concurrency", "16", "--duration", f"{SECONDS}s", "--warmup", "0"]
        command += ["--input-tokens", "32", "--output-tokens", "16", "--timeout", f"{TIMEOUT_S}s"]
        command += ["--out", str(out)]
        started = time.monotonic()
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        # nothing hangs: the run ends within its duration, one timeout and start-up
        assert time.monotonic() - started < SECONDS + TIMEOUT_S + 15
        records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        finished = {r["request_id"] for r in records if r["error"] != UNFINISHED}
        # a line for every finished request, and none still open at the proxy: a request the
        # run's end cut is logged when the proxy sees it end, if it ever reached the proxy
        deadline = time.monotonic() + 10
        while not (finished <= {line["request_id"] for line in requests_logged(proxy)}):
            assert time.monotonic() < deadline, "a request has no proxy log line"
            time.sleep(0.1)
        while not (active := proxy.samples("latency_proxy_requests_active")) or any(active):
            assert time.monotonic() < deadline, active
            time.sleep(0.1)
        summary = json.loads((out / "summary.json").read_text())
        report = (out / "report.md").read_text()
        return records, requests_logged(proxy), summary, report


def requests_logged(proxy) -> list[dict]:
    """The proxy's lines for model calls (loadgen's /tokenize calls left out)."""
    return [
        line
        for line in proxy.log_lines()
        if line.get("msg") == "request" and line["path"] in GENERATION_PATHS
    ]


@pytest.mark.slow
def test_every_request_recorded_once_alike_on_both_sides(tmp_path: Path, start_proxy) -> None:
    records, lines, summary, report = run_chaos(tmp_path, start_proxy, FAULTS)
    by_id = Counter(line["request_id"] for line in lines)
    assert len({r["request_id"] for r in records}) == len(records)  # one record per request
    ids = {r["request_id"] for r in records}  # every request the proxy saw is a record
    assert [line for line in lines if line["request_id"] not in ids] == []
    # only a cooldown request is ended by the run's end, at most one per stream
    cut = [r for r in records if r["error"] == UNFINISHED]
    assert {r["excluded"] for r in cut} <= {COOLDOWN} and len(cut) <= 16, cut
    # one proxy line each; a request the run's end cut may not have reached the proxy yet
    # (one sent a few ms before the end, on a connection still being opened): none then
    assert {by_id[r["request_id"]] for r in records if r["error"] != UNFINISHED} == {1}
    assert {by_id[r["request_id"]] for r in cut} <= {0, 1}
    line_of = {line["request_id"]: line for line in lines}
    mismatched = [
        (r["request_id"], loadgen_kind(r), proxy_kind(line_of[r["request_id"]]))
        for r in records
        if r["request_id"] in line_of and not alike(r, line_of[r["request_id"]])
    ]
    assert mismatched == []
    kinds = Counter(loadgen_kind(r) for r in records if r["error"] != UNFINISHED)
    assert {"ok", "http_503", "http_429", "http_500", "broken"} <= set(kinds), kinds
    assert set(kinds) <= {"ok", "http_503", "http_429", "http_500", "broken"}, kinds
    for r in records:  # nothing outlives its timeout
        assert r["end_at"] - r["sent_at"] < TIMEOUT_S
    # the report counts each failure kind, as the records do
    target = next(iter(summary["targets"].values()))
    measured = [r for r in records if r["excluded"] is None]
    errors = Counter(r["error"] for r in measured if not r["ok"])
    assert target["requests"]["errors"] == dict(errors)
    assert target["requests"]["failed"] == sum(errors.values())
    assert target["requests"]["ok"] == sum(r["ok"] for r in measured)
    (listed,) = [line for line in report.splitlines() if line.startswith("- errors: ")]
    assert all(f"{error}: {n}" in listed for error, n in errors.items()), listed


@pytest.mark.parametrize("fault", ["cut@2", "reset@2"])
def test_a_client_of_the_proxy_can_tell_its_stream_was_cut(start_proxy, fault: str) -> None:
    with simulator("--ttft", "0", "--itl", "0", "--fault", "error=0") as upstream:
        proxy = start_proxy("--upstream", upstream)
        body = json.dumps({"messages": [{"role": "user", "content": "a"}], "stream": True})
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-fault: {fault}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            )
            sock.sendall((head + body).encode())
            received = b""
            while data := sock.recv(65536):
                received += data
                if received.endswith(b"\r\n0\r\n\r\n"):
                    break
        assert received.count(b'"delta":{"content"') == 2  # the two chunks before the cut
        assert not received.endswith(b"\r\n0\r\n\r\n")  # and no clean end after them
