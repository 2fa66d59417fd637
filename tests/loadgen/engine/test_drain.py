"""A run against a server that cannot keep up ends in bounded time: its window, then at most
its drain, after which the measured requests still running are recorded as unfinished."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.records import UNFINISHED
from loadgen.commands.cli import main
from loadgen.engine.budget import Budget
from loadgen.engine.schedule import Block
from loadgen.engine.window import DRAIN_MIN_S, drain_s
from loadgen.stack.processes import simulator

WINDOW_S, DRAIN_S = 10.0, 3.0
STARTUP_S = 6.0  # model lookup, prompt calibration, interpreter start on a busy 2-core box


@pytest.fixture(scope="module")
def one_at_a_time() -> Iterator[str]:
    """The simulator running one sequence at a time: 64-token answers, about 1 req/s."""
    with simulator("--preset", "llama-70b-awq-tp4-a100", "--max-num-seqs", "1") as url:
        yield url


def test_the_default_drain_is_one_window_and_at_least_its_floor() -> None:
    assert drain_s(10.0, None) == DRAIN_MIN_S
    assert drain_s(90.0, None) == 90.0
    assert drain_s(90.0, 5.0) == 5.0
    budget = Budget(Block("a", 0, 2.0, 10.0, None), start=100.0, ramp=2.0, drain=None)
    assert budget.drain_ends() == 100.0 + 2.0 + 10.0 + DRAIN_MIN_S
    counted = Budget(Block("a", 0, 2.0, None, 5), start=100.0, ramp=2.0, drain=4.0)
    assert counted.drain_ends() is None  # its window closes with its fifth measured request
    for at in (103.0, 104.0, 105.0, 106.0, 107.0):
        assert counted.take(at) is None
    assert counted.drain_ends() == 107.0 + 4.0


@pytest.mark.slow
def test_a_drowning_server_ends_the_run_after_the_window_and_its_drain(
    one_at_a_time: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["--target", one_at_a_time, "--rate", "10", "--input-tokens", "64"]
    argv += ["--output-tokens", "64", "--ignore-eos", "--duration", f"{WINDOW_S:g}s"]
    argv += ["--warmup", "0s", "--drain", f"{DRAIN_S:g}s", "--no-progress", "--out", str(out)]
    # a noisy shared box: a P99 of ~100 sends is about its second-worst, so a lag must pass
    # 100 ms (not the default 25) to be the client's
    argv += ["--max-loop-lag", "100ms", "--max-send-lag", "100ms"]
    started = time.monotonic()
    assert main(argv) == 0
    assert time.monotonic() - started < WINDOW_S + DRAIN_S + STARTUP_S
    (t,) = json.loads((out / "summary.json").read_text())["targets"].values()
    requests = t["requests"]
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["excluded"] is None]
    cut = [r for r in measured if r["error"] == UNFINISHED]
    assert requests["unfinished"] == len(cut) >= 50  # ~100 offered, ~13 served
    assert requests["ok"] + requests["unfinished"] + requests["failed"] == len(measured)
    assert requests["failed"] == 0 and UNFINISHED not in requests["errors"]
    assert t["metrics"]["e2e_s"]["count"] == requests["ok"]  # unfinished: in no percentile
    assert all(r["e2e_s"] is None or not r["ok"] for r in cut)
    state = t["steady_state"]
    assert not state["steady"] and state["drain_s"] == DRAIN_S
    assert state["reasons"][0].startswith(f"{len(cut)} of the window's {len(measured)}")
    said = capsys.readouterr().out.split("(latencies in ms)\n", 1)[1].splitlines()
    name = next(iter(json.loads((out / "summary.json").read_text())["targets"]))
    assert said[0].startswith(f"{name}: SATURATED: the server fell behind the load: ")
    assert said[1] == (
        f"{name}: {len(cut)} measured requests still running {DRAIN_S:g} s after the window "
        "closed (the drain) ended there: counted as unfinished, left out of every percentile"
    )
    assert not any("client" in line for line in said)  # no claim about the client
