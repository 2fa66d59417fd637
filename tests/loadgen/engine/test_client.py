"""The client and runner against a scripted upstream with exactly known timing (real HTTP/SSE).

The upstream runs in its own process: first content token exactly `ttft` after a request
arrives, then one token every `itl`; stalls and errors on demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import uvloop

from loadgen.analysis.records import UNFINISHED, Record, SummarySettings
from loadgen.analysis.summary import summarize
from loadgen.engine.runner import Runner, RunResult
from loadgen.engine.schedule import Load, plan
from loadgen.engine.targets import Target
from loadgen.engine.workload import Lengths, Workload
from tests.support.scripted_upstream import arrivals, control, running
from tests.support.timing import on_time, wall_clock

TTFT, ITL = 0.2, 0.02


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(TTFT, ITL, {"prompt_tokens": 7}) as url:
        yield url


@pytest.fixture(autouse=True)
def fresh_script(upstream: str) -> None:
    control(upstream, ttft=TTFT, itl=ITL, stall_at=0, fail_every=0)


def drive(
    url: str,
    load: Load,
    *,
    requests: int | None = None,
    duration: float | None = None,
    warmup: float = 0.0,
    output: int = 20,
    names: tuple[str, ...] = ("t",),
    blocks: int = 1,
    on_record: Callable[[Record], None] | None = None,
) -> RunResult:
    targets = {name: Target(name, url) for name in names}
    rng = np.random.default_rng(0)
    workload = Workload("chat", Lengths(16, 16), Lengths(output, output), rng)
    runner = Runner(
        targets, dict.fromkeys(targets, "scripted"), workload, rng, 30.0, on_record=on_record
    )
    uvloop.run(runner.run(plan(list(targets), blocks, warmup, duration, requests), load))
    return runner.result


def measured(result: RunResult) -> list[Record]:
    return [r for r in result.records if not r.excluded]


@wall_clock
@pytest.mark.parametrize(("concurrency", "requests"), [(1, 6), (64, 128)])
def test_ttft_and_tpot_match_the_truth(upstream: str, concurrency: int, requests: int) -> None:
    # the warmup opens the connections and staggers the workers, as in a real run
    load = Load(concurrency=concurrency)
    result = drive(upstream, load, requests=requests, warmup=0.5)
    records = measured(result)
    assert len(records) == requests and all(r.ok for r in records)
    ttft = np.median([r.ttft_s for r in records])
    tpot = np.median([r.tpot_s for r in records])
    # the suite's one timing tolerance: never early, late by at most LATE on a loaded box
    assert on_time(ttft, TTFT)
    assert on_time(tpot * 19, ITL * 19)  # 20 tokens: the whole decode, not a per-token ratio
    first = records[0]
    assert first.output_tokens == 20 and first.input_tokens == 7
    assert first.token_source == "usage_total" and len(first.itl_s) == 19
    assert first.time_to_first_chunk_s < first.ttft_s / 2  # the role chunk comes at once
    assert first.ttfnt_s["3"] == pytest.approx(TTFT + 2 * ITL, rel=0.1)
    # throughput over the measured window agrees with Little's law: streams / E2E
    summary = summarize(result.records, result.phases, result.loop_lag, [], SummarySettings())
    rate = summary["targets"]["t"]["throughput"]["requests_per_s"]
    assert rate == pytest.approx(concurrency / np.mean([r.e2e_s for r in records]), rel=0.2)


def test_request_counts_are_exact_per_target_and_block(upstream: str) -> None:
    before = {a["id"] for a in arrivals(upstream)}
    result = drive(
        upstream, Load(concurrency=5), requests=23, warmup=0.3, names=("a", "b"), blocks=3, output=2
    )
    for name in ("a", "b"):
        mine = [r for r in measured(result) if r.target == name]
        assert len(mine) == 23
        assert sorted({r.block for r in mine}) == [0, 1, 2]
    assert [(p.target, p.block) for p in result.phases] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
    ]
    starts = [p.start_at for p in result.phases]
    assert starts == sorted(starts)  # blocks ran one after another, A, B, A, B …
    assert all(r.excluded for r in result.records if r.intended_at < result.phases[0].start_at)
    seen = {a["id"] for a in arrivals(upstream)}
    # load went on as cooldown requests until each block's last measured one was done; those
    # still running then were cut there and recorded: every request the server saw is one
    assert seen - before == {r.request_id for r in result.records}  # every request carried its id
    cut = [r for r in result.records if r.error == UNFINISHED]
    assert len(cut) >= 6 and all(r.excluded == "cooldown" for r in cut)
    assert len({r.request_id for r in result.records}) == len(result.records)


def test_open_loop_arrivals_at_the_server(upstream: str) -> None:
    before = len(arrivals(upstream))
    drive(upstream, Load(rate=50.0, arrival="poisson"), duration=4.0, output=2)
    times = np.array([a["at"] for a in arrivals(upstream)[before:]])
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert rate == pytest.approx(50.0, rel=0.25)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.25)  # exponential gaps


def test_constant_arrivals_are_regular(upstream: str) -> None:
    before = len(arrivals(upstream))
    drive(upstream, Load(rate=20.0, arrival="constant"), duration=2.0, output=2)
    gaps = np.diff([a["at"] for a in arrivals(upstream)[before:]])
    assert np.median(gaps) == pytest.approx(0.05, rel=0.1)
    assert gaps.std() / gaps.mean() < 0.3


def test_stall_shows_in_latency_counted_from_intended_send(upstream: str) -> None:
    """The server freezes for 1 s: requests due meanwhile are charged the wait."""
    stall = 1.0
    control(upstream, stall_at=len(arrivals(upstream)) + 20, stall_s=stall)
    result = drive(upstream, Load(rate=20.0, arrival="constant"), duration=3.0, output=2)
    records = sorted(measured(result), key=lambda r: r.intended_at)
    assert len(records) == 60 and all(r.ok for r in records)
    ttft = np.array([r.ttft_s for r in records])
    assert ttft.max() == pytest.approx(stall + TTFT, rel=0.15)
    hit = ttft > TTFT + 0.3
    assert 12 <= hit.sum() <= 24  # ≈ the 20 requests due during the 1 s stall
    # each was charged from its own intended time to the end of the stall, plus the TTFT:
    # so intended time + TTFT is about the same moment for all of them
    first_tokens = np.array([r.intended_at + r.ttft_s for r in records])[hit]
    assert np.ptp(first_tokens) < 0.3
    # the client itself kept up: its send lag stays small
    assert np.percentile([r.send_lag_s for r in records], 99) < 0.1  # ≪ the 1 s stall


def test_errors_are_recorded_not_raised(upstream: str) -> None:
    control(upstream, fail_every=4, fail_status=503)
    records = measured(drive(upstream, Load(concurrency=1), requests=12, output=2))
    failed = [r for r in records if not r.ok]
    assert len(records) == 12 and len(failed) == 3
    assert {(r.status, r.error) for r in failed} == {(503, "http_503")}
    refused = measured(drive("http://127.0.0.1:9", Load(concurrency=1), requests=2))
    assert [r.error for r in refused] == ["ClientConnectorError"] * 2


def test_a_lagging_client_marks_the_run_invalid(upstream: str) -> None:
    def block_the_loop(record: Record) -> None:
        time.sleep(0.06)  # a client too busy to send on time

    result = drive(
        upstream,
        Load(rate=20.0, arrival="constant"),
        duration=1.0,
        output=2,
        on_record=block_the_loop,
    )
    summary = summarize(result.records, result.phases, result.loop_lag, [], SummarySettings())
    target = summary["targets"]["t"]
    assert target["valid"] is False
    reasons = " ".join(target["invalid_reasons"])
    assert "send lag" in reasons and "event-loop lag" in reasons
    assert target["client"]["send_lag_s"]["p99"] > 0.05


@wall_clock
def test_a_slow_schedule_does_not_keep_a_block_open(upstream: str) -> None:
    started = time.perf_counter()
    result = drive(upstream, Load(rate=0.5, arrival="constant"), duration=1.0, output=2)
    assert time.perf_counter() - started < 1.8  # not until the next arrival, 2 s in
    assert len(measured(result)) == 1
