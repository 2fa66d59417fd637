"""loadgen.locust with real Locust on loopback: a headless master and two workers.

Locust runs in its own processes (it monkey-patches the standard library for gevent, which
must not reach pytest's). One Locust run and one loadgen run, at the same time, each against
its own instance of the same simulator, in its fixed timing with a script (so it lists what
it received at /arrivals), answer every test:
the master's run directory holds each request the simulator received exactly once, its
figures match the scripted timing, `loadgen compare` finds the two engines alike, and
Locust's own CSV agrees with summary.json.

The simulator scales each request's TTFT and gaps by up to ±JITTER: with exact timing every
figure has a spread of a fraction of a millisecond, and a bootstrap CI that narrow calls the
two clients' sub-millisecond differences (and the other processes on a 2-core box) a
difference; a server's own spread is what a comparison is judged against. Each run has its
own simulator, started alike, so the k-th request of either run draws the same scales (the
simulator seeds them by arrival order): the two runs sample one distribution, not two draws
of it that a 95% CI would tell apart now and then; and running both at once gives them the
same machine, other processes included.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.analysis.records import RunData
from loadgen.commands import compare
from loadgen.runs import rundir
from loadgen.stack.processes import LOOPBACK, free_port, simulator, stop
from tests.support import ROOT
from tests.support.browser import CHROMIUM, Browser, open_offline, sections
from tests.support.scripted_upstream import MODEL, arrivals
from tests.support.timing import EARLY, LATE

pytestmark = pytest.mark.slow  # a long system test: the default run leaves it out (pytest -m slow)

# not importorskip: importing locust monkey-patches this process for gevent (threads, sockets,
# signals), which breaks every test after it; finding the package is enough
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed (pip install -e '.[test]')", allow_module_level=True)

TTFT, ITL, TOKENS = 0.2, 0.02, 8
JITTER = 0.25
USERS = 4  # two per worker
RUN_S = 4
WORKLOAD = ["--input-tokens", "16", "--output-tokens", str(TOKENS), "--model", MODEL]


@dataclass
class Runs:
    locust: Path
    loadgen: Path
    csv: Path
    received: list[dict]  # what the simulator received during the Locust run

    @property
    def data(self) -> RunData:
        return rundir.read(self.locust)


def start(args: list[str], log: Path, cwd: Path = ROOT) -> subprocess.Popen:
    """`python -m ARGS` in `cwd` with its output in `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for_line(log: Path, text: str, process: subprocess.Popen, timeout_s: float = 60) -> None:
    """Poll a child's log until a line with `text` appears (or the child exits)."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in {log}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("locust")
    port = free_port()
    worker = ["loadgen.locust", "--worker", "--master-host", LOOPBACK, "--master-port", str(port)]
    timing = ["--ttft", str(TTFT), "--itl", str(ITL), "--jitter", str(JITTER)]
    script = ["--script", json.dumps({"prompt_tokens": 7}), "--served-model-name", MODEL]
    with simulator(*timing, *script) as url, simulator(*timing, *script) as twin:
        master = start(
            [
                "loadgen.locust", "--master", "--headless", "--master-bind-host", LOOPBACK,
                "--master-bind-port", str(port), "--expect-workers", "2",
                "-u", str(USERS), "-r", "100", "-t", f"{RUN_S}s", "--host", url,
                "--out", str(tmp / "locust"), "--csv", str(tmp / "csv"), *WORKLOAD,
            ],
            tmp / "master.log",
        )  # fmt: skip
        workers = [
            start(worker, tmp / f"worker{i}.log") for i in range(2)
        ]
        # loadgen starts once the master has its workers (Locust logs it as it sets the run
        # time), so its requests, after its own start-up, overlap the Locust run's
        wait_for_line(tmp / "master.log", "Run time limit set", master)
        baseline = start(
            [
                "loadgen", "--target", twin, "--concurrency", str(USERS),
                "--duration", f"{RUN_S - 1}s", "--warmup", "0s", "--no-progress",
                "--out", str(tmp / "loadgen"), *WORKLOAD,
            ],
            tmp / "loadgen.log",
        )  # fmt: skip
        try:
            codes = baseline.wait(60), master.wait(60)
        finally:
            for process in [baseline, master, *workers]:
                stop(process)
        logs = [(tmp / name).read_text()[-3000:] for name in ("loadgen.log", "master.log")]
        assert codes == (0, 0), logs
        received = arrivals(url)
    yield Runs(tmp / "locust", tmp / "loadgen", tmp / "csv_stats.csv", received)


def test_master_holds_every_request_the_simulator_received_once(runs: Runs):
    records = runs.data.records
    ids = [r.request_id for r in records]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(a["id"] for a in runs.received)
    assert len(records) > 2 * USERS
    assert {r.shard for r in records} == {0, 1}  # both workers, by index
    assert len({r.worker for r in records}) == 2  # and by Locust's id
    assert all(r.trace_id for r in records)
    assert {r.excluded for r in records} <= {None, "cooldown"}
    assert len(runs.data.phases) == 2  # one measured window per worker, as shards


def scripted(measured: float, value: float) -> bool:
    """on_time, for a value the simulator scaled by up to ±JITTER."""
    return value * (1 - JITTER) - EARLY <= measured <= value * (1 + JITTER) + LATE


def test_figures_agree_with_the_scripted_timing(runs: Runs):
    measured = [r for r in runs.data.records if r.excluded is None]
    assert measured and all(r.ok for r in measured)
    for r in measured:
        assert scripted(r.ttft_s, TTFT), r
        assert scripted(r.tpot_s, ITL), r
        assert r.output_tokens == TOKENS
        assert r.intended_at <= r.sent_at and 0 <= r.send_lag_s < 0.1
    summary = rundir.read_summary(runs.locust)
    (target,) = summary["targets"].values()
    assert target["client"]["loop_lag_s"]["count"] > 0  # the workers' timer greenlets
    assert target["requests"]["ok"] == len(measured)


def test_compare_finds_locust_and_loadgen_alike(runs: Runs, capsys: pytest.CaptureFixture):
    """Every P50 compare judges (TTFT, TPOT, ITL, E2E) is within the margin or
    indistinguishable. The one tail these runs are long enough for, ITL P99 (P99 needs 100
    samples: only the gaps have them), is left out: here it measures the other processes'
    stalls on a 2-core box (seen 20-40 ms in either engine), not the engines."""
    assert compare.main([str(runs.loadgen), str(runs.locust)]) == 0
    text = capsys.readouterr().out
    medians = [line for line in text.splitlines() if " P50 is " in line]
    assert all("indistinguishable" in line for line in medians), text
    assert "figures are the same as" in text


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
def test_a_locust_runs_page_opens_offline(
    runs: Runs, browser: Browser, request: pytest.FixtureRequest
) -> None:
    """report.html, written by the same code as loadgen's, in chromium with the network off."""
    keep = request.config.getoption("--screenshot")
    shot = Path(keep) / "locust.png" if keep else None
    page = open_offline(browser, runs.locust / "report.html", shot)
    assert sections(page)[:3] == ["verdict", "figures", "figure-latency_cdf"]
    block = rundir.read_summary(runs.locust)["targets"]
    ((name, t),) = block.items()
    tip = page.hover(f'#chart-cdf-e2e .mark[data-tip^="{name} E2E P50"]')
    assert tip is not None and f" {t['metrics']['e2e_s']['p50'] * 1e3:.1f} [" in tip


def test_locust_csv_shows_the_ttft_median_of_summary_json(runs: Runs):
    rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(runs.csv.open())}
    path = "/v1/chat/completions"
    assert {("TTFT", path), ("TPOT", path), ("E2E", path)} <= set(rows)
    (target,) = rundir.read_summary(runs.locust)["targets"].values()
    ttft = target["metrics"]["ttft_s"]
    assert int(rows[("TTFT", path)]["Request Count"]) == ttft["count"]
    # Locust keeps response times rounded to 10 ms between 100 ms and 1 s
    assert abs(float(rows[("TTFT", path)]["Median Response Time"]) - ttft["p50"] * 1e3) <= 10


HOGGED = '''
import time

from locust import User, constant, task

from loadgen.locust import LoadgenUser


class Streams(LoadgenUser):
    pass


class Hog(User):
    """Holds the hub 50 ms at a time: the process, not the server, is the bottleneck."""

    fixed_count = 1
    wait_time = constant(0.01)  # a timer, so the hub polls between spins (sleep(0) would not)

    @task
    def spin(self):
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
'''


def test_a_hogged_locust_process_marks_its_run_invalid(tmp_path: Path):
    locustfile = tmp_path / "hogged.py"
    locustfile.write_text(HOGGED)
    with simulator("--ttft", str(TTFT), "--itl", str(ITL)) as url:
        done = subprocess.run(
            [
                sys.executable, "-m", "loadgen.locust", "-f", str(locustfile), "--headless",
                "-u", "3", "-r", "100", "-t", "3s", "--host", url, "--out", str(tmp_path / "run"),
                "--input-tokens", "16", "--output-tokens", str(TOKENS),
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (target,) = rundir.read_summary(tmp_path / "run")["targets"].values()
    assert target["requests"]["ok"] > 0
    assert target["valid"] is False
    assert any("event-loop lag" in reason for reason in target["invalid_reasons"])
    assert target["client"]["loop_lag_s"]["p99"] > 0.025


def test_locust_never_runs_inside_the_test_process() -> None:
    """Locust (gevent's monkey-patching) stays in its own processes: imported here it would
    break threads, signals and sockets for every later test."""
    assert "locust" not in sys.modules and "gevent" not in sys.modules
