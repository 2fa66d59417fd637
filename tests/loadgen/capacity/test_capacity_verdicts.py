"""`capacity`'s three verdicts against real simulators: decided probes in fixed timing, and a
level that only shows its saturation after tens of seconds (undecided first, then failing
once its probe is extended).

Fixed timing has no queue: TTFT is 100 ms ± 50% whatever the load, so a limit far above or
below it decides every probe at once. The slow level is the llama preset serving one
request at a time (--max-num-seqs 1: about 2 requests/s of 128 in / 32 out) offered 6% more
than that on a constant schedule: its queue, and TTFT with it, grows by about 0.06 s every
second from the first request on — after a 30 s warm-up, too little against TTFT's level to
call it saturated in one probe's window (it still rose: undecided), but clear in the window
twice as long.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.stack.processes import free_port, running, stop
from tests.support import ROOT

WORKLOAD = ["--input-tokens", "128", "--output-tokens", "16", "--warmup", "0.5s", "--no-progress"]
# the box is shared: a client blurred by its neighbours would leave probes undecided
LENIENT = ["--max-loop-lag", "1s", "--max-send-lag", "1s"]


def _sim(tmp_path_factory: pytest.TempPathFactory, *args: str) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    argv = [sys.executable, "-m", "loadgen.sim", *args, "--port", str(port)]
    with running(argv, url + "/health", log, timeout_s=60):  # a busy box starts slowly
        yield url


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _sim(tmp_path_factory, "--ttft", "100ms", "--itl", "10ms", "--jitter", "0.5")


@pytest.mark.slow
def test_fixed_timing_decides_every_probe_at_once(fixed: str, tmp_path: Path) -> None:
    argv = ["capacity", "--target", fixed, "--by", "concurrency", "--budget", "40s"]
    slo = ["--slo", "ttft=400ms@p90", "--slo", "tpot=50ms@p90"]
    meets = [*argv, *slo, *WORKLOAD, *LENIENT, "--repeat", "1"]
    assert main([*meets, "--out", str(tmp_path / "meets")]) == 0
    result = json.loads((tmp_path / "meets" / "capacity.json").read_text())
    (t,) = result["targets"].values()
    *searched, repeated = t["probes"]
    assert result["stopped"] == "budget" and len(searched) >= 2  # no queue: nothing fails
    assert [p["level"] for p in searched][:2] == [1, 2]  # doubling
    for p in t["probes"]:
        assert p["outcome"] == "meets" and p["extension"] == 0 and p["settled"] is True
        low, high = p["intervals"]["ttft"]["ci95"]
        assert 0.05 <= low <= high <= 0.4  # 100 ms ± 50%: P90 near 140 ms
    assert t["capacity"] == searched[-1]["level"] and t["bracket"][1] is None
    # --repeat: the bracket's one end again, with a seed of its own
    assert repeated["repeat"] == 1 and repeated["level"] == t["capacity"]
    assert len({p["seed"] for p in t["probes"]}) == len(t["probes"])
    assert t["repeat"]["agree"] == 1 and t["repeat"]["runs"][0]["crossing"] is None

    tight = ["--slo", "ttft=40ms@p90", "--slo", "tpot=50ms@p90"]  # below every TTFT
    assert main([*argv, *tight, *WORKLOAD, *LENIENT, "--out", str(tmp_path / "fails")]) == 0
    result = json.loads((tmp_path / "fails" / "capacity.json").read_text())
    (t,) = result["targets"].values()
    assert result["stopped"] == "bracket" and t["capacity"] is None
    (probe,) = t["probes"]  # one stream fails and nothing lies below it
    assert probe["outcome"] == "fails" and probe["intervals"]["ttft"]["side"] == "above"
    assert t["reason"].startswith("even 1 concurrent streams does not meet: TTFT P90")


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _sim(tmp_path_factory, "--preset", "llama-70b-awq-tp4-a100", "--max-num-seqs", "1")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_level_that_saturates_slowly_is_undecided_then_fails(
    one_at_a_time: str, tmp_path: Path
) -> None:
    from loadgen.commands import run
    from loadgen.commands.cli import build_parser, config_from

    # its service rate, measured: one request at a time, back to back, each taking its E2E
    args = ["--target", one_at_a_time, "--concurrency", "1", "--requests", "20", *WORKLOAD]
    args += ["--output-tokens", "32", "--out", str(tmp_path / "rate")]
    summary = run.measure(config_from(build_parser().parse_args(args), args))
    service_s = next(iter(summary["targets"].values()))["metrics"]["e2e_s"]["mean"]
    level = round(1.06 / service_s, 2)
    argv = [
        *("-m", "loadgen", "capacity", "--target", one_at_a_time, "--start", f"{level}"),
        *("--server-metrics", f"{one_at_a_time}/metrics", "--arrival", "constant"),
        *("--slo", "ttft=10s@p90", "--slo", "tpot=50ms@p90", *WORKLOAD, *LENIENT),
        *("--output-tokens", "32", "--warmup", "30s", "--out", str(tmp_path / "search")),
    ]
    process = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    seen = []
    try:
        assert process.stderr is not None
        for line in process.stderr:  # the verdict lines: stop once the level is decided
            if line.startswith("capacity:   "):
                seen.append(line)
                if not line.startswith("capacity:   undecided"):
                    break
        process.send_signal(signal.SIGINT)
        assert process.wait(120) == 130
    finally:
        stop(process)
    result = json.loads((tmp_path / "search" / "capacity.json").read_text())
    (t,) = result["targets"].values()
    first, *extensions = t["probes"]
    assert first["level"] == level and first["outcome"] == "undecided" and first["extended"]
    assert any("TTFT still rose" in u for u in first["unsure"]), first["unsure"]
    chain = [first, *extensions]
    for before, after in itertools.pairwise(chain):
        assert before["extended"] and after["extends"] == before["number"]
    last = chain[-1]
    assert last["level"] == level and not last["extended"]
    assert last["outcome"] == "fails" and not last["steady"], seen
    assert last["window_s"] >= 1.8 * first["window_s"]  # twice the window
    assert last["seed"] != first["seed"]
    assert t["capacity"] is None and t["bracket"] == [None, level]
    report = (tmp_path / "search" / "report.md").read_text()
    assert "undecided: TTFT still rose" in report and "— extended" in report
