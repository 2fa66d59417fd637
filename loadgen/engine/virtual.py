"""A run on the simulator's virtual clock (`--target virtual:PRESET`): the workload becomes
the twin's requests (loadgen/sim/twin.py), and their predicted timings become records, so a
virtual run writes the run directory a real one does. No sockets, no sleeping.

Open loop draws its arrivals as the runner would (schedule.arrivals); closed loop is N
sessions of back-to-back turns; a replay keeps the trace window's arrivals at its speed.
Like a real run's window, a request due before the warm-up's end is kept as "warmup"; one
due after the window closed is not sent; one still running a drain after it is UNFINISHED.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from loadgen.analysis.records import UNFINISHED, Phase, Record
from loadgen.engine.schedule import arrivals
from loadgen.engine.targets import VIRTUAL
from loadgen.engine.window import drain_s
from loadgen.engine.workload import Lengths
from loadgen.replay import Arrival
from loadgen.sim import presets, twin, vllm_args
from loadgen.sim.presets import Preset

MAX_REQUESTS = 2_000_000  # a window asking for more is refused, not simulated for hours


def is_virtual(spec: str) -> bool:
    return spec.startswith(VIRTUAL)


def preset(spec: str, virtual_args: str = "") -> Preset:
    """The preset a `virtual:NAME` or `virtual:FILE.toml` names, with --virtual-args (vLLM's
    flags, as `python -m loadgen.sim` takes them) applied. ValueError naming what is wrong."""
    name = spec.removeprefix(VIRTUAL)
    if name.endswith(".toml") or "/" in name:
        if not Path(name).is_file():
            raise ValueError(f"--target {spec}: no such preset file")
        try:
            base = presets.load_file(name)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"--target {spec}: {exc}") from None
    else:
        try:
            base = presets.load(name)
        except ValueError as exc:
            raise ValueError(f"--target {spec}: {exc}") from None
    applied, _warnings = vllm_args.apply(base, vllm_args.parse_text(virtual_args))
    return applied


class Window:
    """One block's window on the run's clock: warm-up [0, warmup_s), then measured for
    duration_s, or until `requests` measured requests are due (neither: all that come)."""

    def __init__(self, warmup_s: float, duration_s: float | None, requests: int | None) -> None:
        self.warmup_s = warmup_s
        self.duration_s = duration_s
        self.requests = requests

    def due(self, offsets: Iterable[float]) -> list[float]:
        """The offsets (increasing, perhaps endless) the window sends."""
        kept: list[float] = []
        measured = 0
        for at in offsets:
            if self.duration_s is not None and at >= self.warmup_s + self.duration_s:
                break
            if self.requests is not None and measured == self.requests:
                break
            if len(kept) == MAX_REQUESTS:
                raise ValueError(f"the window asks for more than {MAX_REQUESTS:,} requests")
            kept.append(at)
            measured += at >= self.warmup_s
        return kept


def closed_loop(
    model: Preset,
    window: Window,
    streams: int,
    inputs: Lengths,
    outputs: Lengths,
    rng_seed: int,
    replicas: int,
) -> list[twin.Timing]:
    """`streams` sessions of back-to-back turns (think 0), as many turns as the window sends:
    more are tried until every stream's last turn falls outside the window."""
    turns = max(4, math.ceil((window.requests or 0) / streams) + 1)
    while True:
        rng = np.random.default_rng(rng_seed)
        requests = [
            twin.Request(0.0, inputs.draw(rng), outputs.draw(rng), session=f"s{s}")
            for _turn in range(turns)
            for s in range(streams)
        ]
        timings = twin.run(model, requests, replicas, rng_seed).timings
        pairs = sorted(zip(requests, timings, strict=True), key=lambda p: p[1].arrival)
        due = [t.arrival for _r, t in pairs]
        kept = pairs[: len(window.due(due))]
        if {r.session for r, _t in pairs[len(kept) :]} == {r.session for r in requests}:
            return [t for _r, t in kept]  # no stream ran out of turns
        if len(requests) * 2 > MAX_REQUESTS:
            raise ValueError(f"the window asks for more than {MAX_REQUESTS:,} virtual requests")
        turns *= 2


def records(
    target: str,
    timings: Sequence[twin.Timing],
    window: Window,
    level: float,
    start: float,
    drain: float | None,
) -> tuple[list[Record], Phase]:
    """The block's records and its phase, in epoch seconds from `start`."""
    measured = [t.arrival for t in timings if t.arrival >= window.warmup_s]
    closes = (
        window.warmup_s + window.duration_s
        if window.duration_s is not None
        else max(measured, default=window.warmup_s)
    )
    cut = closes + drain_s(closes - window.warmup_s, drain)
    out, done = [], window.warmup_s
    for i, t in enumerate(timings):
        warm = t.arrival < window.warmup_s
        finished = warm or t.finished <= cut
        end = t.finished if finished else cut
        if not warm:
            done = max(done, end)
        out.append(
            Record(
                request_id=f"virtual-{i}",
                target=target,
                intended_at=start + t.arrival,
                sent_at=start + t.arrival,
                end_at=start + end,
                send_lag_s=0.0,
                ok=finished,
                status=200,
                error=None if finished else UNFINISHED,
                excluded="warmup" if warm else None,
                level=level,
                session=None,
                ttft_s=t.ttft if t.first_token <= end else None,
                tpot_s=t.tpot if finished else None,
                e2e_s=t.e2e if finished else None,
                time_to_first_chunk_s=t.ttft if t.first_token <= end else None,
                input_tokens=t.prompt_tokens,
                output_tokens=t.output_tokens if finished else None,
                token_source="usage_total",
                finish_reason="length" if finished else None,
                cached_tokens=t.cached_tokens,
                server_queue_s=t.queue,
                server_ttft_s=t.prefill,
                server_decode_s=t.decode if finished else None,
            )
        )
    phase = Phase(
        target=target,
        block=0,
        start_at=start + window.warmup_s,
        end_at=start + closes,
        level=level,
        done_at=start + done,
        drain_s=drain_s(closes - window.warmup_s, drain),
    )
    return out, phase


def run_block(
    model: Preset,
    target: str,
    *,
    window: Window,
    level: float,
    sweep: str,
    inputs: Lengths,
    outputs: Lengths,
    arrival: str,
    gamma_shape: float,
    seed: int,
    replicas: int,
    start: float,
    drain: float | None = None,
    trace: Sequence[Arrival] | None = None,
) -> tuple[list[Record], Phase, list[int]]:
    """One level of a rate or concurrency sweep, or a replay's window (`trace`, at its
    speed), on the virtual clock: its records, its phase and how many requests each replica
    served."""
    rng = np.random.default_rng([seed, 0])
    lines: list[int] | None = None
    if trace is not None:
        requests = [
            twin.Request(a.offset_s, a.record.input_tokens, a.record.output_tokens) for a in trace
        ]
        timings = twin.run(model, requests, replicas, seed).timings
        lines = [a.record.line for a in trace]
    elif sweep == "concurrency":
        streams = int(level)
        timings = closed_loop(model, window, streams, inputs, outputs, seed, replicas)
    else:
        offsets = window.due(arrivals(level, arrival, rng, gamma_shape))
        requests = [twin.Request(at, inputs.draw(rng), outputs.draw(rng)) for at in offsets]
        timings = twin.run(model, requests, replicas, seed).timings
    served = [0] * replicas
    for t in timings:
        served[t.replica] += 1
    out, phase = records(target, timings, window, level, start, drain)
    for record, line in zip(out, lines or (), strict=False):
        record.replay_index = line
    return out, phase, served
