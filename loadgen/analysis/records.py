"""The raw data of a run: what the client measured and what its figures are judged against.

A run directory stores exactly these (requests.jsonl holds one `Record` a line, run.json the
rest), so `summarize`, `merge` and `compare` recompute every figure from them. All are built
with keywords: a field added or reordered cannot shift another's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.analysis.server_metrics import ServerWindow
from loadgen.analysis.slo import DEFAULT_SLO, Slos

# a Record's error: still running when its window's drain ended (measured) or its block
# ended (cooldown), ended there
UNFINISHED = "unfinished"
FIRST_N = 3  # a record's ttfnt_s holds the time to this many tokens (summary's ttf3t_s)
# the meter's own figures a Record keeps as they are
FIGURES = (
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "time_to_first_chunk_s",
    "itl_s",
    "coalesced_fraction",
    "tokens_per_chunk",
    "input_tokens",
    "output_tokens",
    "response_id",
)
# the meter's server signals a Record keeps as they are (reasoning_source too, as text)
SIGNALS = (
    "answer_ttft_s",
    "reasoning_s",
    "reasoning_tokens",
    "cached_tokens",
    "server_queue_s",
    "server_ttft_s",
    "server_decode_s",
    "server_itl_s",
    "spec_acceptance_rate",
    "spec_acceptance_length",
    "max_itl_s",
    "stalls",
)


@dataclass(slots=True, kw_only=True)
class Record:
    """One line of requests.jsonl. Times *_at are epoch seconds; *_s are durations."""

    request_id: str
    target: str
    intended_at: float
    sent_at: float
    end_at: float
    send_lag_s: float
    ok: bool
    status: int | None = None
    error: str | None = None
    excluded: str | None = None  # "warmup" or "cooldown": kept here, left out of results
    block: int = 0
    shard: int = 0  # a Locust run: the worker's index
    worker: str | None = None  # a Locust run: the worker's id (Locust's client_id)
    level: float | None = None  # the sweep's concurrency or rate, or the replay's speed
    replay_index: int | None = None  # a replayed record's line in its trace file
    session: str | None = None  # a multi-turn conversation's id (--turns)
    turn: int | None = None  # the request's turn in it, from 1
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    time_to_first_chunk_s: float | None = None
    ttfnt_s: dict[str, float] = field(default_factory=dict)  # str(FIRST_N) -> seconds
    itl_s: list[float] = field(default_factory=list)
    coalesced_fraction: float | None = None  # share of gaps that are bursts (buffering)
    tokens_per_chunk: list[int] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: str | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    trace_id: str | None = None  # of the traceparent sent: joins the proxy's and vLLM's spans
    # what the server said about the request (latency_proxy/measure/meter.py; None: not sent)
    answer_ttft_s: float | None = None
    reasoning_s: float | None = None
    reasoning_tokens: int | None = None
    reasoning_source: str | None = None  # server | counted
    cached_tokens: int | None = None
    server_queue_s: float | None = None
    server_ttft_s: float | None = None
    server_decode_s: float | None = None
    server_itl_s: float | None = None
    spec_acceptance_rate: float | None = None
    spec_acceptance_length: float | None = None
    max_itl_s: float | None = None
    stalls: int | None = None
    # a checked answer (--eval, --consistency): verdicts only; the text stays in memory
    eval_id: str | None = None  # the eval item's id
    correct: bool | None = None  # whether the answer matched the item's
    eval_timed_out: bool | None = None  # True: the item's regex was cut off, not judged
    consistency_id: str | None = None  # the fixed prompt's index, sent again under load
    output_hash: str | None = None  # keyed hash of the output (equal outputs, equal hashes)
    first_difference: int | None = None  # first differing word against the reference
    content: dict[str, str] | None = None  # output and expected text, with --content-capture

    def to_json(self) -> bytes:
        # orjson writes a dataclass field by field, the bytes of asdict's, without its deep copy
        return orjson.dumps(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        return cls(**data)


@dataclass(slots=True, kw_only=True)
class Phase:
    """One block's measured window, in epoch seconds.

    [start_at, end_at] is when its measured requests were due (warmup and cooldown left
    out): a target's active time, the denominator of its throughput, is the union of these.
    done_at is when its last measured request finished; the client's loop lag and GPU samples
    count for the block up to then. An interrupted block (Ctrl-C, SIGTERM) ends at the
    interruption; the requests then in flight were cancelled and are not records. Measured
    requests still running drain_s after end_at were ended then, as records.UNFINISHED.
    A warm-up asked to settle (settle.py) says how long it took and whether it did.
    """

    target: str
    block: int
    start_at: float
    end_at: float
    level: float | None = None
    done_at: float | None = None
    interrupted: bool = False
    warmup_s: float | None = None  # a settling warm-up's length
    settled: bool | None = None  # None: the warm-up was a fixed time
    # an unsettled warm-up's client in-flight count: mean over its second and last quarter
    warmup_in_flight: tuple[float, float] | None = None
    drain_s: float | None = None  # how long its measured requests could run on after end_at
    # the client process's CPU time over the block's wall time (1.0: one core busy); None:
    # not measured (a Locust node, an older run)
    client_cpu: float | None = None

    @property
    def busy(self) -> tuple[float, float]:
        return self.start_at, self.done_at if self.done_at is not None else self.end_at


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    at: float  # epoch seconds
    source: str
    gpu: str
    memory_mib: float | None
    power_w: float | None
    energy_mj: float | None = None  # the energy counter since boot, where the exporter has one


@dataclass(frozen=True, slots=True, kw_only=True)
class SummarySettings:
    """What the figures are judged against; stored in run.json so a merge judges alike."""

    slo: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SLO))
    slo_percentiles: dict[str, str] = field(default_factory=dict)  # those given as @pNN
    max_send_lag_s: float = 0.025
    max_loop_lag_s: float = 0.025
    weight_bytes: float | None = None
    kv_bytes_per_token: float = 0.0
    gpu_bandwidth_bytes_s: float | None = None
    gpus: int = 1
    gpu_hour_price: float | None = None  # USD per GPU: the cost block (cost.py)
    seed: int = 0
    slice_s: float | None = None  # summary.json's per-target time slices (slices.py)

    @property
    def slos(self) -> Slos:
        return Slos(self.slo, self.slo_percentiles)


@dataclass(slots=True, kw_only=True)
class RunData:
    """Everything a run directory holds besides its summary and report."""

    records: list[Record] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    loop_lag: list[tuple[float, float]] = field(default_factory=list)  # (epoch, lag_s)
    gpu: list[GpuSample] = field(default_factory=list)
    server: list[ServerWindow] = field(default_factory=list)  # --server-metrics windows
    settings: SummarySettings = field(default_factory=SummarySettings)
    meta: dict[str, Any] = field(default_factory=dict)  # command line, load, sweep levels
