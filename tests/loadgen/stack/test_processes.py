"""loadgen.stack.processes: the start/stop helper that the embedded stack, bench/ and tests
share."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.stack.processes import NotReady, answers, free_port, running, stop, wait_ready

SERVE = "import http.server, sys; http.server.test(http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind='127.0.0.1')"  # noqa: E501
IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"  # noqa: E501


def test_running_yields_a_child_that_answers_and_stops_it(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with running([sys.executable, "-c", SERVE, str(port)], url, tmp_path / "a.log") as child:
        assert child.poll() is None
        assert answers(url)
    assert child.poll() is not None
    assert not answers(url)


def test_a_child_that_dies_is_reported_at_once_with_its_log(tmp_path: Path) -> None:
    started = time.monotonic()
    args = [sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"]
    with (
        pytest.raises(NotReady, match=r"exited with 3 before ready.*bad flag"),
        running(args, f"http://127.0.0.1:{free_port()}/", tmp_path / "b.log", timeout_s=30),
    ):
        pass
    assert time.monotonic() - started < 10  # not the whole timeout


def test_wait_ready_times_out_on_a_silent_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(NotReady, match="not ready after"):
            wait_ready(f"http://127.0.0.1:{free_port()}/", child, timeout_s=0.5)
    finally:
        stop(child)


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", IGNORE_TERM], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    assert stop(child, timeout_s=0.3) == -signal.SIGKILL
    assert stop(child) == -signal.SIGKILL  # stopping a stopped child is harmless
