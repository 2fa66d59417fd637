"""`python -m loadgen.locust --replay` with real Locust on loopback against loadgen.sim: each
record at its own offset from one start (within the client's send-lag budget), with its own
lengths, once, in a single process and over two workers; bad traces stop before any load.

Locust runs in its own processes, as in test_locust.py (its gevent patching must not reach
pytest's). The simulator is in fixed mode, so it answers each prompt with exactly the
max_tokens asked for (ignore_eos) and counts its tokens as its /tokenize does.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.records import UNFINISHED
from loadgen.locust.run import Roster
from loadgen.runs import rundir
from loadgen.stack.processes import LOOPBACK, free_port, simulator, stop
from tests.loadgen.locust.test_locust import start, wait_for_line
from tests.loadgen.replay.test_replay import mooncake_trace, offsets, on_schedule, served
from tests.support import run_module

CONTEXT = 32768  # the simulator's max_model_len in fixed mode


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--ttft", "0.05", "--itl", "0.01") as url:
        yield url


def replay_args(url: str, trace: Path, out: Path) -> list[str]:
    return ["--headless", "-u", "0", "--host", url, "--replay", str(trace), "--out", str(out)]


def locust(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("loadgen.locust", *args, timeout=90)


def check_replayed(data: rundir.RunData, rows: list[dict], trace: Path) -> None:
    """Every record of the trace once, at its offset from one start, with its lengths."""
    assert sorted(r.replay_index for r in data.records) == list(range(1, len(rows) + 1))
    assert all(r.ok and r.excluded is None for r in data.records)
    for record in data.records:
        row = rows[record.replay_index - 1]
        assert record.input_tokens == row["input_length"]  # sized as loadgen sizes it
        assert record.output_tokens == row["output_length"]  # max_tokens, with ignore_eos
        assert record.level == 1.0
    for index, offset in offsets(data).items():
        expected = (rows[index - 1]["timestamp"] - rows[0]["timestamp"]) / 1000
        assert offset == pytest.approx(expected, abs=1e-5)  # intended: exactly the trace's
    on_schedule(data.records)  # and sent then, within the send-lag budget
    meta = data.meta["replay"]
    assert meta["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert (meta["format"], meta["speed"], meta["window"]["records"]) == ("mooncake", 1.0, 10)
    assert (data.meta["sweep"], data.meta["levels"]) == ("replay", [1.0])


def test_a_single_locust_process_replays_each_record_at_its_offset(
    sim: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = mooncake_trace(trace, n=10)
    before = served(sim)
    done = locust(*replay_args(sim, trace, tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    data = rundir.read(tmp_path / "run")
    check_replayed(data, rows, trace)
    assert served(sim) - before == len(rows)
    assert {r.shard for r in data.records} == {0} and len(data.phases) == 1


@pytest.mark.slow  # three Locust processes start: 10 to 20 s on 2 cores
def test_two_workers_split_the_trace_and_send_it_from_one_start(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = mooncake_trace(trace, n=10)
    port = free_port()
    master = start(
        [
            "loadgen.locust", "--master", "--master-bind-host", LOOPBACK,
            "--master-bind-port", str(port), "--expect-workers", "2",
            *replay_args(sim, trace, tmp_path / "run"),
        ],
        tmp_path / "master.log",
    )  # fmt: skip
    worker = ["loadgen.locust", "--worker", "--master-host", LOOPBACK, "--master-port", str(port)]
    workers = [start(worker, tmp_path / f"worker{i}.log") for i in range(2)]
    before = served(sim)
    try:
        wait_for_line(tmp_path / "master.log", "2 workers connected", master)
        code = master.wait(60)
    finally:
        for process in [master, *workers]:
            stop(process)
    assert code == 0, (tmp_path / "master.log").read_text()[-3000:]
    data = rundir.read(tmp_path / "run")
    check_replayed(data, rows, trace)  # merged: the run one client would have made
    assert served(sim) - before == len(rows)  # each record sent once, by one worker
    for shard in (0, 1):  # every 2nd record of the window, by worker index
        mine = sorted(r.replay_index for r in data.records if r.shard == shard)
        assert mine == list(range(1 + shard, len(rows) + 1, 2))
    assert len({r.worker for r in data.records}) == 2 and len(data.phases) == 2
    starts = [p.start_at for p in data.phases]
    assert max(starts) - min(starts) < 1e-5  # one start, in each worker's own clock


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{bad\n', ":2: not JSON"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
            f'{{"timestamp": 9, "input_length": {CONTEXT}, "output_length": 4}}\n',
            f":2: {CONTEXT} + 4 tokens is more than the model's context ({CONTEXT})",
        ),
    ],
)
def test_a_bad_trace_exits_2_naming_file_and_line_before_any_load(
    sim: str, tmp_path: Path, content: str, message: str
) -> None:
    trace = tmp_path / "bad.trace"
    trace.write_text(content)
    before = served(sim)
    done = locust(*replay_args(sim, trace, tmp_path / "run"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"loadgen.locust: {trace}{message}" in done.stderr
    assert served(sim) == before and not (tmp_path / "run").exists()


def test_the_master_starts_the_nodes_once_all_are_ready_in_worker_index_order() -> None:
    roster = Roster({"a", "b", "c"})
    assert roster.ready("c", 0, "same") is None
    assert roster.ready("a", 2, "same") is None
    assert roster.ready("b", 1, "same") == {"c": (0, 3), "b": (1, 3), "a": (2, 3)}
    mixed = Roster({"a", "b"})
    mixed.ready("a", 0, "one")
    with pytest.raises(ValueError, match="its trace differs from another node's"):
        mixed.ready("b", 1, "other")


@pytest.mark.slow  # three Locust processes start
def test_a_worker_with_another_trace_ends_the_test_with_exit_2(sim: str, tmp_path: Path) -> None:
    """Each worker reads --replay at its own path: the master compares what they read."""
    port = free_port()
    for name, n in (("master", 10), ("w0", 10), ("w1", 6)):
        (tmp_path / name).mkdir()
        mooncake_trace(tmp_path / name / "trace.jsonl", n=n)
    relative = Path("trace.jsonl")
    worker = ["loadgen.locust", "--worker", "--master-host", LOOPBACK, "--master-port", str(port)]
    master_args = [
        "loadgen.locust", "--master", "--master-bind-host", LOOPBACK, "--master-bind-port",
        str(port), "--expect-workers", "2", *replay_args(sim, relative, tmp_path / "run"),
    ]  # fmt: skip
    before = served(sim)
    processes = [
        start(args, tmp_path / f"{name}.log", cwd=tmp_path / name)
        for name, args in (("master", master_args), ("w0", worker), ("w1", worker))
    ]
    try:
        code = processes[0].wait(60)
    finally:
        for process in processes:
            stop(process)
    log = (tmp_path / "master.log").read_text()
    assert code == 2, log[-3000:]
    assert "its trace differs from another node's" in log
    assert served(sim) == before and not (tmp_path / "run").exists()


@pytest.mark.slow  # a simulated server one request at a time, a 6 s window and its drain
def test_a_drowning_server_ends_a_locust_replay_after_its_drain(tmp_path: Path) -> None:
    """Locust keeps loadgen's rule: measured requests still running when the drain ends are
    cut there, recorded as unfinished, and the test ends in bounded time."""
    trace = tmp_path / "flood.jsonl"
    # 2 s a request, one at a time: without the drain the last would end a minute in
    rows = [{"timestamp": i * 200, "input_length": 64, "output_length": 128} for i in range(30)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with simulator("--preset", "llama-70b-awq-tp4-a100", "--max-num-seqs", "1") as url:
        started = time.monotonic()
        args = [*replay_args(url, trace, tmp_path / "run"), "--drain", "2s"]
        done = locust(*args, "--exit-code-on-error", "0")  # unfinished fail in Locust's table
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert took < 6 + 2 + 25  # window, drain, and Locust's own start and stop on 2 cores
    data = rundir.read(tmp_path / "run")
    cut = [r for r in data.records if r.error == UNFINISHED]
    assert len(cut) >= 20 and all(r.excluded is None for r in cut)  # ~0.5 req/s of 5 offered
    assert data.phases[0].drain_s == 2.0
    summary = rundir.read_summary(tmp_path / "run")
    (t,) = summary["targets"].values()
    assert t["requests"]["unfinished"] == len(cut) and not t["steady_state"]["steady"]
