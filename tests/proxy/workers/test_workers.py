"""--workers: N processes on the main port, one admin port, one log stream.

The settings' checks run in this process; the rest with the proxy as real processes
(a supervisor and its spawned workers) in front of the scripted upstream.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from latency_proxy.base.config import ConfigError, load_settings
from latency_proxy.base.worker_count import usable_cpus
from loadgen.stack.processes import free_port
from tests.support import ROOT
from tests.support.proxy import ProxyProcess, read_raw
from tests.support.scripted_upstream import MODEL

UPSTREAM = {"upstream": ["http://x"]}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("0", "--workers: 0 is less than 1"),
        ("-2", "--workers: -2 is negative"),
        ("1.5", "--workers: '1.5' is not a worker count or auto"),
        ("some", "--workers: 'some' is not a worker count or auto"),
        ("1025", "--workers: 1025 is more than 1024"),
    ],
)
def test_a_worker_count_that_cannot_run_is_refused(given: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_settings({**UPSTREAM, "workers": given}, environ={})


def test_more_workers_than_the_open_files_limit_allows_are_refused() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "latency_proxy", "--upstream", "http://x", "--workers", "100"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
    )
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr == (
        "latency-proxy: error: --workers: 100: the file-descriptor limit (256, ulimit -Hn) "
        "allows at most 48 workers\n"
    )


def test_workers_0_exits_2_with_one_line_before_listening() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "latency_proxy", "--upstream", "http://x", "--workers", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("latency-proxy: error: --workers: 0 is less than 1;")
    assert run.stderr.count("\n") == 1


def test_auto_is_the_cpus_the_process_may_use_capped_by_the_cgroup_quota(tmp_path: Path) -> None:
    pinned = len(os.sched_getaffinity(0))
    assert load_settings({**UPSTREAM, "workers": "auto"}, environ={}).workers == usable_cpus()
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: one worker
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no quota: the pinned CPUs
    assert usable_cpus(tmp_path) == pinned
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(v1) == min(pinned, 2)  # 1.5 CPUs, rounded up


# with real processes


def chat(
    url: str, script: dict, request_id: str, started: threading.Semaphore | None = None
) -> tuple[int, bytes, bool]:
    """One streamed chat on a connection of its own: status, raw body, cut short; `started`
    is released once its answer began."""
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    headers = {"x-script": json.dumps(script), "x-request-id": request_id}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        if started is not None:
            started.release()
        try:
            raw, cut = read_raw(r)
        except httpx.ReadError:  # reset: its worker was killed
            return r.status_code, b"", True
        return r.status_code, raw, cut


def wait_for(check, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def ready(proxy: ProxyProcess) -> bool:
    try:
        return httpx.get(proxy.admin + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def counted(proxy: ProxyProcess, metric: str) -> float:
    """The sum of a metric's samples on the admin port's /metrics."""
    return sum(proxy.samples(metric))


def served_by(proxy: ProxyProcess, prefix: str) -> dict[str, int]:
    """Request id → the worker whose log line recorded it, for the ids with this prefix."""
    return {
        line["request_id"]: line["worker"]
        for line in proxy.log_lines()
        if line.get("msg") == "request" and line["request_id"].startswith(prefix)
    }


def worker_pids(proxy: ProxyProcess) -> dict[int, int]:
    """Worker number → pid of the latest process to serve as it."""
    pids = {}
    for line in proxy.log_lines():
        if line.get("msg", "").startswith("Started server process") and "worker" in line:
            pids[line["worker"]] = int(line["msg"].split("[")[1].rstrip("]"))
    return pids


@pytest.fixture
def two_workers(start_proxy, upstream) -> ProxyProcess:
    proxy = start_proxy("--upstream", upstream.url, "--workers", "2")
    assert wait_for(lambda: ready(proxy)), proxy.output()
    assert len([line for line in proxy.log_lines() if line["msg"] == "worker ready"]) == 2
    return proxy


@pytest.mark.slow
def test_a_sigkilled_worker_is_restarted_and_nothing_it_counted_is_lost(two_workers) -> None:
    proxy = two_workers
    quick = {"tokens": 2}
    with ThreadPoolExecutor(16) as pool:
        first = list(pool.map(lambda n: chat(proxy.url, quick, f"q{n}"), range(24)))
        assert all(status == 200 and not cut for status, _, cut in first)
        requests = "latency_proxy_requests_total"
        assert wait_for(lambda: counted(proxy, requests) == 24)
        lines = [line for line in proxy.log_lines() if line.get("msg") == "request"]
        assert {line["worker"] for line in lines} == {0, 1}  # the port spreads connections
        long = {"tokens": 40, "itl": 0.05}  # 2 s each
        started = threading.Semaphore(0)
        streams = [pool.submit(chat, proxy.url, long, f"s{n}", started) for n in range(12)]
        assert all(started.acquire(timeout=10) for _ in streams)  # every stream is being served
        victim = worker_pids(proxy)[0]
        os.kill(victim, signal.SIGKILL)
        after = list(pool.map(lambda n: chat(proxy.url, quick, f"a{n}"), range(8)))
        assert all(status == 200 and not cut for status, _, cut in after)  # still answering
        done = [future.result() for future in streams]
    whole = [raw for status, raw, cut in done if not cut and raw.endswith(b"data: [DONE]\n\n")]
    assert 0 < len(whole) < len(done)  # the survivor's streams ran to their end
    assert wait_for(lambda: ready(proxy))  # the restarted worker serves
    assert worker_pids(proxy)[0] != victim
    assert counted(proxy, "latency_proxy_worker_restarts_total") == 1
    # what the dead worker counted stays, its cut streams were never counted, nothing twice
    assert wait_for(lambda: counted(proxy, requests) == 24 + len(whole) + 8), proxy.metrics()
    assert counted(proxy, "latency_proxy_requests_active") == 0


@pytest.mark.slow
def test_sigterm_drains_every_worker_then_the_supervisor_ends(two_workers) -> None:
    proxy = two_workers
    long = {"tokens": 20, "itl": 0.05}  # 1 s each
    with ThreadPoolExecutor(8) as pool:
        started = threading.Semaphore(0)
        streams = [pool.submit(chat, proxy.url, long, f"d{n}", started) for n in range(8)]
        assert all(started.acquire(timeout=10) for _ in streams)
        proxy.process.send_signal(signal.SIGTERM)
        assert wait_for(lambda: not ready(proxy), 2)  # unready at once
        done = [future.result() for future in streams]
    assert all(status == 200 and raw.endswith(b"data: [DONE]\n\n") for status, raw, _ in done)
    assert proxy.process.wait(30) == 0
    draining = [line for line in proxy.log_lines() if line["msg"] == "draining"]
    assert {line.get("worker") for line in draining} == {None, 0, 1}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_second_proxy_on_a_served_port_is_refused(two_workers, upstream, workers) -> None:
    """SO_REUSEPORT lets any process of the same user join the port's group: a second
    proxy must be refused the port, whatever its --workers, not take half its traffic."""
    second = subprocess.Popen(
        [sys.executable, "-m", "latency_proxy", "--upstream", upstream.url, "--workers",
         workers, "--port", str(two_workers.port), "--admin-port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    try:
        out, err = second.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        second.kill()
        out, err = second.communicate()
    assert (second.returncode, out) == (1, ""), err
    assert err == "latency-proxy: error: cannot listen: Address already in use\n"
    assert ready(two_workers)


def address_space(pid: int) -> tuple[int, int]:
    """A process's VmSize and VmRSS, bytes."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return tuple(int(fields[name].split()[0]) * 1024 for name in ("VmSize", "VmRSS"))  # type: ignore[return-value]


RESTARTS = 8


@pytest.mark.slow
def test_restarts_leave_the_supervisors_address_space_flat(two_workers) -> None:
    """A dead worker's store is folded into the sums and let go: before, each restart
    kept its 64 MiB mapped, until mapping a new one failed."""
    proxy = two_workers
    quick = {"tokens": 2}
    before = address_space(proxy.process.pid)
    for restart in range(1, RESTARTS + 1):
        assert chat(proxy.url, quick, f"r{restart}")[0] == 200
        assert wait_for(lambda n=restart: counted(proxy, "latency_proxy_requests_total") == n)
        victim = worker_pids(proxy)[restart % 2]
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda v=victim, n=restart % 2: worker_pids(proxy)[n] != v)
        assert wait_for(lambda: ready(proxy)), proxy.output()
    after = address_space(proxy.process.pid)
    grown = after[0] - before[0]
    print(f"supervisor VmSize {before[0] >> 20} -> {after[0] >> 20} MiB, "
          f"VmRSS {before[1] >> 20} -> {after[1] >> 20} MiB over {RESTARTS} restarts")  # fmt: skip
    assert grown < 32 * 2**20, (before, after)  # less than half of one store
    assert counted(proxy, "latency_proxy_worker_restarts_total") == RESTARTS
    assert counted(proxy, "latency_proxy_requests_total") == RESTARTS  # the dead ones' too


def children(pid: int) -> set[int]:
    return {int(n) for n in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.mark.slow
def test_a_worker_dying_as_it_restarts_backs_off_and_the_proxy_serves_on(
    start_proxy, upstream
) -> None:
    """Only a fault at the proxy's first start ends it; a restarted worker that dies before
    it serves is started again later and later (0.1 s, doubling), the others serve on."""
    proxy = start_proxy("--upstream", upstream.url, "--workers", "3")
    assert wait_for(lambda: ready(proxy)), proxy.output()
    long = {"tokens": 40, "itl": 0.05}  # 2 s each
    with ThreadPoolExecutor(12) as pool:
        started = threading.Semaphore(0)
        streams = [pool.submit(chat, proxy.url, long, f"b{n}", started) for n in range(12)]
        assert all(started.acquire(timeout=10) for _ in streams)
        victim = worker_pids(proxy)[1]
        for _ in range(4):  # the served worker, then three replacements as soon as they exist
            known = children(proxy.process.pid)
            os.kill(victim, signal.SIGKILL)
            victim = wait_for(lambda k=known: next(iter(children(proxy.process.pid) - k), 0))
            assert victim, proxy.output()
        done = [future.result() for future in streams]
    assert proxy.process.poll() is None, proxy.output()
    assert [status for status, _, _ in done] == [200] * 12
    assert all(raw.endswith(b"data: [DONE]\n\n") for _, raw, cut in done if not cut)
    # a stream was cut only if the killed worker served it (the port spreads connections as it
    # will, so how many is chance): each of the others was served to its end and logged
    whole = {f"b{n}" for n, (_, _, cut) in enumerate(done) if not cut}
    assert wait_for(lambda: whole <= set(served_by(proxy, "b"))), proxy.output()
    assert set(served_by(proxy, "b")) == whole and 1 not in served_by(proxy, "b").values()
    assert wait_for(lambda: ready(proxy)), proxy.output()
    after = [chat(proxy.url, {"tokens": 2}, f"c{n}") for n in range(6)]
    assert all(status == 200 and not cut for status, _, cut in after)
    again = [line for line in proxy.log_lines() if line["msg"] == "worker ended; starting it again"]
    assert [line["restart_in_s"] for line in again] == [0, 0.1, 0.2, 0.4]
    assert counted(proxy, "latency_proxy_worker_restarts_total") == 4


@pytest.mark.slow
def test_a_stopped_worker_is_named_unready_and_replaced(two_workers) -> None:
    """A worker that stops answering (SIGSTOP, a loop stuck) looked ready while a share of
    new connections hung on it: within 2.5 s of its last heartbeat /readyz names it, it is
    killed and a new one started, as gunicorn's worker timeout does."""
    proxy = two_workers
    victim = worker_pids(proxy)[0]
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()

    def named() -> dict | None:
        r = httpx.get(proxy.admin + "/readyz", timeout=2)
        return r.json() if r.status_code == 503 and "0" in r.json().get("workers", {}) else None

    seen = wait_for(named, 10)
    noticed = time.monotonic() - stopped
    assert seen and seen["status"] == "unready", proxy.output()
    print(f"stopped worker named unready after {noticed:.2f} s")
    assert noticed < 4.0, noticed  # 2 s of silence, 0.5 s between checks, and this box's load
    assert wait_for(lambda: not Path(f"/proc/{victim}").exists() or b"Z" in Path(
        f"/proc/{victim}/stat").read_bytes().split(b")")[-1][:3], 5)  # fmt: skip
    assert wait_for(lambda: worker_pids(proxy)[0] != victim)
    assert wait_for(lambda: ready(proxy)), proxy.output()
    assert all(chat(proxy.url, {"tokens": 2}, f"z{n}")[0] == 200 for n in range(6))
    killed = [line for line in proxy.log_lines() if line["msg"].startswith("worker stopped")]
    assert [line["worker"] for line in killed] == [0]
    assert counted(proxy, "latency_proxy_worker_restarts_total") == 1


@pytest.mark.slow
def test_many_workers_under_an_address_space_limit_all_serve_and_count(
    start_proxy, upstream
) -> None:
    """Under `ulimit -v` 512 MiB each process fits with its own store, but the supervisor
    did not fit six held at once (some 190 MiB + 6 x 64 MiB): stores went unmapped,
    /readyz stayed 'starting' and /metrics lost what they counted."""
    limit = 512 * 2**20
    proxy = start_proxy(
        "--upstream", upstream.url, "--workers", "6", ready=False, address_space=(limit, limit)
    )
    proxy.wait_ready(60)
    assert wait_for(lambda: ready(proxy), 90), proxy.output()
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda n: chat(proxy.url, {"tokens": 2}, f"v{n}"), range(30)))
    assert all(status == 200 and not cut for status, _, cut in done)
    logged = lambda: len([line for line in proxy.log_lines() if line["msg"] == "request"])  # noqa: E731
    assert wait_for(lambda: logged() == 30)
    assert wait_for(lambda: counted(proxy, "latency_proxy_requests_total") == 30), proxy.metrics()
    assert address_space(proxy.process.pid)[0] < limit
