"""The virtual driver's parts (drivers/virtual.py, `--target virtual:PRESET`): the workload becomes
the twin's requests (loadgen/sim/twin/deployment.py, virtual_requests.py), and their
predicted timings and streams (virtual_stream.py) become records, so a virtual run writes
the run directory a real one does. No sockets, no sleeping.

Open loop draws its arrivals as the runner would (schedule.arrivals), each a request or a
conversation's start; closed loop is N streams of back-to-back conversations; a replay
keeps the trace window's arrivals at its speed (an agents' call waits on the one it
continues), and a record longer than the context is refused 400 at once, as vLLM refuses it.
Like a real run's window, a request due before the warm-up's end is kept as "warmup" (a
replayed call that waits on another, when that one is); one due after the window closed is
not sent; one still running a drain after it is UNFINISHED.
What a live run scrapes from vLLM's /metrics as its window opens and closes (the waiting
and running gauges, the preemptions between) is read off the twin's timings
(`server_window`), so steady.py judges a virtual level on the same figures as a served one.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from loadgen.analysis.records import UNFINISHED, Phase, Record
from loadgen.analysis.server_metrics import ServerWindow
from loadgen.engine.schedule import arrivals
from loadgen.engine.targets import VIRTUAL
from loadgen.engine.virtual_requests import Planned, Prompts
from loadgen.engine.virtual_stream import Stream
from loadgen.engine.window import drain_s
from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset
from loadgen.sim.twin import budget
from loadgen.sim.vllm_flags import engine as vllm_engine
from loadgen.sim.vllm_flags.table import parse_text

MAX_REQUESTS = 2_000_000  # a window asking for more is refused, not simulated for hours
# what one request costs from plan to report, measured on a 70B preset at rate 3 (9,000
# requests, streams, summary and report): time on one busy core, memory held to the end
SECONDS_PER_REQUEST = 4e-3
BYTES_PER_REQUEST = 8_000
SAY_AFTER_S = 10.0  # a run estimated longer says its estimate before it starts


def is_virtual(spec: str) -> bool:
    return spec.startswith(VIRTUAL)


def bundled(spec: str) -> bool:
    """`virtual:NAME` names a bundled preset; `virtual:FILE.toml` a file (a fitted one, say);
    a bare `virtual:` the catalogue's GPU and model its --virtual-args give."""
    name = spec.removeprefix(VIRTUAL)
    return bool(name) and not (name.endswith(".toml") or "/" in name)


def preset(spec: str, virtual_args: str = "") -> Preset:
    """The preset a `virtual:NAME` or `virtual:FILE.toml` names, or a bare `virtual:` with
    --gpu and --model-config in --virtual-args derives (vllm_engine.from_catalogue), with the
    rest of --virtual-args (vLLM's flags, as `python -m loadgen.sim` takes them) applied.
    ValueError naming what is wrong."""
    flags = parse_text(virtual_args)
    applied, _warnings = vllm_engine.apply_flags(base(spec, flags), flags)
    return applied


def what_if(spec: str, virtual_args: str) -> str:
    """The flags of --virtual-args that change the target's preset (vllm_engine.what_if): the
    ones a fitted preset's held-out error does not cover."""
    return vllm_engine.what_if(base(spec, parse_text(virtual_args)), virtual_args)


def base(spec: str, flags: argparse.Namespace) -> Preset:
    """The preset before --virtual-args' engine flags: named by the target, or derived from
    the catalogue by --gpu and --model-config (then the target names none)."""
    name = spec.removeprefix(VIRTUAL)
    try:
        derived = vllm_engine.from_catalogue(flags)
    except (ValueError, OSError) as exc:
        raise ValueError(f"--virtual-args: {exc}") from None
    if derived is not None:
        if name:
            raise ValueError(
                f"--target {spec} with --virtual-args --gpu: a preset or the catalogue, not "
                "both (--target virtual: --virtual-args '--gpu ID --model-config FILE')"
            )
        return derived
    if not name:
        raise ValueError(
            f"--target {spec}: name a preset (virtual:NAME, virtual:FILE.toml) or give "
            "--virtual-args '--gpu ID --model-config FILE'"
        )
    if not bundled(spec):
        if not Path(name).is_file():
            raise ValueError(f"--target {spec}: no such preset file")
        try:
            return presets.load_file(name)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"--target {spec}: {exc}") from None
    try:
        return presets.load(name)
    except ValueError as exc:
        raise ValueError(f"--target {spec}: {exc}") from None


def expected_requests(
    sweep: str,
    levels: Sequence[float],
    window: Window,
    turns: int = 1,
) -> int | None:
    """The requests the run's windows send, counted before any is planned; None when only
    the twin could tell (a closed loop over a duration, a replay)."""
    if sweep == "rate":
        per_level = [
            level * (window.warmup_s + window.duration_s) * turns
            if window.duration_s is not None
            else (window.requests or 0) + level * window.warmup_s * turns
            for level in levels
        ]
        return math.ceil(sum(per_level))
    if sweep == "concurrency" and window.requests is not None:
        return window.requests * len(levels)
    return None


def cost_fault(requests: int, budget_s: float, available: int | None) -> str | None:
    """Why a virtual run of `requests` should not start (past --virtual-budget, or past the
    memory the process can have), None when it may."""
    seconds, memory = requests * SECONDS_PER_REQUEST, requests * BYTES_PER_REQUEST
    said = f"a virtual run of ~{requests:,} requests"
    if seconds > budget_s:
        return (
            f"{said} takes ~{_minutes(seconds)} to simulate (~{SECONDS_PER_REQUEST * 1e3:g} ms "
            f"each), past --virtual-budget {_minutes(budget_s)}: shorten --duration or lower "
            "--rate, or raise --virtual-budget"
        )
    if available is not None and memory > available * budget.BUDGET_SHARE:
        return (
            f"{said} holds ~{memory / 1e9:.1f} GB of records; {available / 1e9:.1f} GB is "
            "available: shorten --duration or lower --rate"
        )
    return None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def check_replicas(model: Preset, replicas: int) -> None:
    """ValueError when --virtual-replicas of `model` would not fit in memory (twin/budget.py),
    before any work."""
    available = budget.available_bytes()
    if fault := budget.replicas_fault("--virtual-replicas", model, replicas, available):
        raise ValueError(fault)


def stream_interval(virtual_args: str) -> int:
    """Tokens per streamed chunk after the first, as --virtual-args's --stream-interval says."""
    return int(parse_text(virtual_args).stream_interval)


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


def plan(
    model: Preset,
    window: Window,
    level: float,
    sweep: str,
    prompts: Prompts,
    arrival: str,
    gamma_shape: float,
    seed: int,
    replicas: int,
) -> Planned:
    """One level's requests as the runner would send them: open loop, one request (or one
    conversation) per arrival; closed loop, `level` streams of back-to-back conversations.
    Turns the window would not send are left out. ValueError for a request longer than the
    model's context, naming where its length came from."""
    if sweep == "concurrency":
        planned = closed_loop(model, window, int(level), prompts, seed, replicas)
    else:
        rng = np.random.default_rng([seed, 0])
        planned = Planned()
        for n, at in enumerate(window.due(arrivals(level, arrival, rng, gamma_shape))):
            if prompts.turns > 1:  # an arrival is a conversation's start
                prompts.conversation(planned, f"c{n}", at, rng)
            else:
                prompts.one(planned, at, rng)
        if prompts.turns > 1:
            planned = planned.only(sent(model, window, planned, replicas, seed))
    limit = model.max_model_len
    for r in planned.requests:
        if r.prompt_tokens + r.output_tokens > limit:
            raise ValueError(
                f"{prompts.source()}: a request of {r.prompt_tokens:,} + {r.output_tokens:,} "
                f"tokens is more than {model.name}'s context ({limit:,})"
            )
    return planned


def sent(model: Preset, window: Window, planned: Planned, replicas: int, seed: int) -> list[int]:
    """The indices of the requests the window sends: the earliest-due first. A request due
    after the window closed cannot change one due before, so the first ones' arrivals hold
    when the rest are left out (and a parent is due before the requests that wait on it)."""
    timings = twin.run(model, planned.requests, replicas, seed).timings
    order = sorted(range(len(timings)), key=lambda i: timings[i].arrival)
    return sorted(order[: len(window.due(timings[i].arrival for i in order))])


def closed_loop(
    model: Preset, window: Window, streams: int, prompts: Prompts, rng_seed: int, replicas: int
) -> Planned:
    """`streams` streams of conversations back to back (each conversation's first turn
    waits on the stream's last one), as many as the window sends: more are tried until
    every stream has one it does not send."""
    each = max(4, math.ceil((window.requests or 0) / (streams * prompts.turns)) + 1)
    while True:
        rng = np.random.default_rng(rng_seed)
        planned = Planned()
        last: list[int | None] = [None] * streams
        stream_of: list[int] = []  # each request's stream
        for n in range(each):
            for s in range(streams):
                last[s] = prompts.conversation(planned, f"s{s}-{n}", 0.0, rng, last[s])
                stream_of += [s] * (len(planned.requests) - len(stream_of))
        kept = sent(model, window, planned, replicas, rng_seed)
        left = {stream_of[i] for i in set(range(len(stream_of))) - set(kept)}
        if len(left) == streams:
            return planned.only(kept)  # no stream ran out
        if len(planned.requests) * 2 > MAX_REQUESTS:
            raise ValueError(f"the window asks for more than {MAX_REQUESTS:,} virtual requests")
        each *= 2


def records(
    target: str,
    timings: Sequence[twin.Timing],
    window: Window,
    level: float,
    start: float,
    drain: float | None,
    planned: Planned,
    stream: Stream,
    stall_s: float,
) -> tuple[list[Record], Phase]:
    """The block's records and its phase, in epoch seconds from `start`."""
    warmed = planned.warm([t.arrival for t in timings], window.warmup_s)
    measured = [t.arrival for t, warm in zip(timings, warmed, strict=True) if not warm]
    closes = (
        window.warmup_s + window.duration_s
        if window.duration_s is not None
        else max(measured, default=window.warmup_s)
    )
    cut = closes + drain_s(closes - window.warmup_s, drain)
    out, done = [], window.warmup_s
    for i, (t, warm, (session, turn)) in enumerate(
        zip(timings, warmed, planned.labels, strict=True)
    ):
        finished = warm or t.last_sent <= cut  # as the client saw it: its last token
        end = t.last_sent if finished else cut
        if not warm:
            done = max(done, end)
        tpot = t.tpot if finished else None
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
                session=session,
                turn=turn,
                ttft_s=t.ttft if t.first_sent <= end else None,
                tpot_s=tpot,
                e2e_s=t.e2e if finished else None,
                time_to_first_chunk_s=t.ttft if t.first_sent <= end else None,
                input_tokens=t.prompt_tokens,
                output_tokens=t.output_tokens if finished else None,
                token_source="usage_total",
                finish_reason="length" if finished else None,
                cached_tokens=t.cached_tokens,
                server_queue_s=t.queue,
                server_ttft_s=t.prefill,
                server_decode_s=t.decode if finished else None,
                **stream.fields(i, t.arrival, end, tpot, stall_s),
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


def server_window(
    target: str, timings: Sequence[twin.Timing], phase: Phase, start: float
) -> ServerWindow:
    """vLLM's gauges at the window's opening and closing as the twin's engines had them: a
    request waits from reaching the engine until first scheduled, and runs until it
    finishes. Preemptions are those of the requests the engines held during the window (the
    twin counts them per request, not per step)."""
    opened, closed = phase.start_at - start, phase.end_at - start

    def gauges(at: float) -> tuple[float, float]:
        waiting = sum(t.engine_arrival <= at < t.scheduled for t in timings)
        running = sum(t.scheduled <= at < t.finished for t in timings)
        return float(waiting), float(running)

    (waiting_open, running_open), (waiting_close, running_close) = gauges(opened), gauges(closed)
    preempted = sum(t.preemptions for t in timings if t.arrival < closed and t.finished > opened)
    return ServerWindow(
        target=target,
        block=phase.block,
        level=phase.level,
        source=target,
        opened_at=phase.start_at,
        closed_at=phase.end_at,
        histograms={},
        gauges={"waiting": (waiting_open, waiting_close), "running": (running_open, running_close)},
        preemptions=float(preempted),
    )


def run_block(
    model: Preset,
    target: str,
    planned: Planned,
    *,
    window: Window,
    level: float,
    seed: int,
    replicas: int,
    start: float,
    drain: float | None = None,
    lines: Sequence[int] = (),
    stream_interval: int = 1,
    stall_s: float = math.inf,
) -> tuple[list[Record], Phase, ServerWindow, list[int]]:
    """One level of a sweep, or a replay's window (its trace `lines`), on the virtual
    clock: its records, its phase, the engines' gauges around its window and how many
    requests each replica served. A request whose prompt and max_tokens pass the context is
    refused as vLLM refuses it, a 400 at once, and the rest are served."""
    limit = model.max_model_len
    fits = [i for i, r in enumerate(planned.requests) if r.prompt_tokens + r.output_tokens <= limit]
    served = planned.only(fits) if len(fits) < len(planned.requests) else planned
    stream = Stream()
    result = twin.run(model, served.requests, replicas, seed, stream, stream_interval)
    kept, phase = records(
        target, result.timings, window, level, start, drain, served, stream, stall_s
    )
    answered = dict(zip(fits, kept, strict=True))
    out = [
        answered.get(i) or _refused(target, r.arrival, window, level, start)
        for i, r in enumerate(planned.requests)
    ]
    for i, record in enumerate(out):
        record.request_id = f"virtual-{i}"  # by the plan's order, refused ones counted
        record.session, record.turn = planned.labels[i]
    for record, line in zip(out, lines, strict=False):
        record.replay_index = line
    gauges = server_window(target, result.timings, phase, start)
    return out, phase, gauges, result.per_replica


def _refused(target: str, arrival: float, window: Window, level: float, start: float) -> Record:
    """vLLM's answer to a request longer than its context: HTTP 400 at once (its body, never
    recorded, says the maximum context length), no tokens."""
    return Record(
        request_id="",  # numbered by the caller
        target=target,
        intended_at=start + arrival,
        sent_at=start + arrival,
        end_at=start + arrival,
        send_lag_s=0.0,
        ok=False,
        status=400,
        error="http_400",
        excluded="warmup" if arrival < window.warmup_s else None,
        level=level,
    )
