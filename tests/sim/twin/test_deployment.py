"""The twin: requests through replicas of a preset on the virtual clock, timings back."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.twin.deployment import Request

PRESET = presets.load("llama-70b-bf16-tp4-a100")


def with_efficiency(preset: presets.Preset, **terms: float) -> presets.Preset:
    efficiency = dataclasses.replace(preset.perf.efficiency, **terms)
    return dataclasses.replace(preset, perf=dataclasses.replace(preset.perf, efficiency=efficiency))


def test_one_request_alone_takes_its_prefill_then_one_step_per_token() -> None:
    [t] = twin.run(PRESET, [Request(5.0, 1000, 50)]).timings
    assert t.arrival == t.engine_arrival == t.scheduled == 5.0
    assert t.queue == 0 and t.batch == 1 and t.cached_tokens == 0
    decode = PRESET.perf.step_time(1, 1000, 1000, 1).total  # about the first decode step
    assert t.tpot == pytest.approx(decode, rel=0.05)
    assert t.e2e == pytest.approx(t.ttft + 49 * t.tpot)


def test_a_burst_queues_on_one_replica_and_spreads_over_two() -> None:
    burst = [Request(0.0, 2000, 20) for _ in range(8)]
    one = twin.run(PRESET, burst)
    two = twin.run(PRESET, burst, replicas=2)
    assert one.per_replica == [8] and two.per_replica == [4, 4]
    worst = [max(t.ttft for t in run.timings) for run in (one, two)]
    assert worst[1] < 0.6 * worst[0]


def test_a_later_turn_follows_the_previous_ones_end_and_hits_its_prefix() -> None:
    turns = [
        Request(1.0, 600, 30, prefix=(("s", 600),)),
        Request(0.0, 900, 30, prefix=(("s", 900),), parent=0, gap_s=2.0),
    ]
    first, second = twin.run(PRESET, turns).timings
    assert second.arrival == pytest.approx(first.finished + 2.0)
    assert first.cached_tokens == 0 and second.cached_tokens == 592  # 37 whole blocks of 600


def test_a_fan_out_waits_on_one_parent_and_runs_in_parallel() -> None:
    """Three calls on one parent arrive together after its end and its gap, share its
    context and overlap; a call on one of them waits for that one alone."""
    context = (("p", 630),)
    calls = [
        Request(0.0, 600, 30, prefix=context),
        *(Request(9.0, 800, 40, prefix=(*context, (f"b{j}", 210)), parent=0, gap_s=0.5)
          for j in range(3)),
        Request(0.0, 900, 10, prefix=(*context, ("b1", 210)), parent=2, gap_s=0.25),
    ]  # fmt: skip
    first, *fanned, last = twin.run(PRESET, calls).timings
    assert [t.arrival for t in fanned] == pytest.approx([first.finished + 0.5] * 3)
    assert max(t.first_token for t in fanned) < min(t.finished for t in fanned)  # together
    assert all(t.cached_tokens == 624 for t in fanned)  # the parent's 629 tokens computed
    assert last.arrival == pytest.approx(fanned[1].finished + 0.25)
    assert last.cached_tokens == 832  # its parent's 839 tokens computed, in whole blocks


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (Request(0.0, 10, 10, parent=1), "request 1: its parent 1 is not an earlier request"),
        (Request(0.0, 10, 10, parent=-1), "its parent -1 is not an earlier request"),
        (Request(0.0, 10, 10, parent=0, gap_s=-1.0), "request 1: a gap of -1.0 s"),
        (Request(0.0, 10, 10, parent=0, gap_s=float("nan")), "a gap of nan s"),
    ],
)
def test_a_parent_must_come_before_and_a_gap_be_time(request_: Request, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        twin.run(PRESET, [Request(0.0, 10, 10), request_])


def test_parts_are_shared_as_far_as_their_names_agree() -> None:
    parts = [(("a", 1000), ("b", 1000)), (("a", 1000), ("c", 1000)), (("a", 1000), ("b", 1000))]
    requests = [Request(float(i), 2000, 10, prefix=p) for i, p in enumerate(parts)]
    cached = [t.cached_tokens for t in twin.run(PRESET, requests).timings]
    # "a" alone: its whole blocks; "a" then "b" again: all but the last token's block
    assert cached == [0, 992, 1984]


def test_a_turn_finds_the_answer_before_it_in_the_cache() -> None:
    turns = [
        Request(0.0, 600, 30, prefix=(("s", 630),)),
        Request(0.0, 900, 30, prefix=(("s", 930),), parent=0, gap_s=1.0),
    ]
    _first, second = twin.run(PRESET, turns).timings
    assert second.cached_tokens == 624  # 39 whole blocks of the 629 tokens computed


def test_the_front_end_serves_a_burst_one_request_at_a_time() -> None:
    preset = with_efficiency(PRESET, frontend_request=0.01, frontend_token=1e-5)
    timings = twin.run(preset, [Request(0.0, 1000, 5) for _ in range(3)]).timings
    assert [t.engine_arrival for t in timings] == pytest.approx([0.02, 0.04, 0.06])


def test_the_front_ends_output_work_delays_a_request_by_the_streams_running() -> None:
    """The API server's work on each step's tokens (1 ms a token here) is in the queue a new
    request waits in, and its own first token waits behind the others' of its step: the
    client's TTFT less the engine's (from its arrival there) grows with the streams
    running, the engine's does not hold it."""
    preset = with_efficiency(PRESET, frontend_output_token=1e-3)
    probe = Request(0.5, 100, 5)
    streams = [Request(0.0, 100, 400) for _ in range(16)]

    def gap(t: twin.Timing) -> float:
        return t.ttft - (t.first_token - t.engine_arrival)

    [alone] = twin.run(preset, [probe]).timings
    assert gap(alone) == pytest.approx(1e-3)  # its own first token's output work
    busy = twin.run(preset, [*streams, probe]).timings[-1]
    assert gap(busy) >= 17e-3  # behind up to 16 tokens, then a step of 17 sent together
    assert busy.first_sent > busy.first_token and busy.last_sent > busy.finished
    engine_only = twin.run(PRESET, [*streams, probe]).timings[-1]
    assert gap(engine_only) == 0 and engine_only.first_sent == engine_only.first_token


def test_a_request_longer_than_the_context_is_refused() -> None:
    with pytest.raises(ValueError, match="request 1: 8000 \\+ 500 tokens"):
        twin.run(PRESET, [Request(0.0, 10, 10), Request(0.0, 8000, 500)])


def test_the_servers_queue_starts_when_the_step_in_flight_ends() -> None:
    """vLLM's engine takes new requests in between steps: a request that arrives during a
    step is queued when it ends, and vLLM's queue time and the server's TTFT leave that
    wait out; the client's TTFT holds it."""
    streams = [Request(0.0, 100, 400) for _ in range(4)]
    *running, t = twin.run(PRESET, [*streams, Request(0.5, 100, 5)]).timings
    step = running[0].tpot
    assert step is not None
    assert t.engine_arrival == 0.5 < t.queued < 0.5 + step * 1.01
    assert t.scheduled == t.queued and t.queue == 0  # room in the batch: no queue
    assert t.ttft == pytest.approx(t.queued - t.arrival + t.prefill)
    # one sequence a step: it waits out the stream's decode in the queue, from a step's end
    one = dataclasses.replace(PRESET, engine=dataclasses.replace(PRESET.engine, max_num_seqs=1))
    first, second = twin.run(one, [Request(0.0, 100, 50), Request(0.5, 100, 5)]).timings
    assert second.queued > second.engine_arrival and second.scheduled >= first.finished
    assert second.queue == pytest.approx(second.scheduled - second.queued)
    assert second.queued - second.engine_arrival < (first.tpot or 0) * 1.01
