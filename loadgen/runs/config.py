"""RunConfig: one load run as its flags asked for it, typed, built once by commands/cli.py.

Everything past the parser reads this, never an argparse Namespace. It is frozen: a run that
derives from another (a worker's share of a --workers run, a probe of a search) is a
`dataclasses.replace` of it. It goes through JSON unchanged, which is how the supervisor
hands each worker process its configuration.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.records import SummarySettings
from loadgen.analysis.settle import Settle
from loadgen.engine.probes import ProbeSettings
from loadgen.engine.workload import NO_THINK, Durations, Lengths
from loadgen.replay import ReplaySettings

DEFAULT_CONCURRENCY = 8
DEFAULT_DURATION = "15s"
DEFAULT_WARMUP = 2.0  # seconds; a replay's is 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    command: str  # what was run, for run.json and the report
    out: Path  # the run directory

    # where load goes
    targets: tuple[str, ...]  # --target specs in order, without repeats
    targets_file: str | None
    model: str | None
    embedded: bool  # start the simulator and the proxy first (run.on_stack)
    overrides: Mapping[str, str]  # built-in target name -> URL (the embedded stack's)
    virtual_args: str = ""  # vLLM's flags for a virtual: target's preset
    virtual_replicas: int = 1  # a virtual: target's replicas, requests sent least-loaded
    virtual_budget_s: float = 300.0  # a virtual run estimated to take longer is refused

    # what each request asks for
    endpoint: str  # chat | completions
    input_tokens: Lengths
    output_tokens: Lengths
    ignore_eos: bool
    temperature: float
    dataset: str | None
    tokenizer: str | None  # a local tokenizer.json sizes prompts instead of /tokenize
    prompt_seed: int | None = None  # seeds prompt words; None: fresh for each run (run.measure)
    shared_prefix_tokens: int = 0  # words every prompt of a run opens with
    turns: int = 1  # requests per conversation, each resending the ones before
    think_time: Durations = NO_THINK  # between a turn's answer and the next turn

    # how hard, how long
    sweep: str  # concurrency | rate | replay: what `levels` are
    levels: tuple[float, ...]  # closed-loop streams (ints), open-loop requests/s, replay speeds
    arrival: str
    gamma_shape: float
    duration_s: float | None  # measured time per target and level, or
    requests: int | None  # measured requests per target and level
    warmup_s: float
    settle: Settle | None = None  # the warm-up lasts warmup_s, then until steady (capacity's)
    drain_s: float | None = None  # measured requests run on this long after the window at most
    blocks: int | None  # per target; None: 1, or 2 with several targets
    timeout_s: float  # per request
    stall_threshold_s: float  # a longer gap between tokens counts as a stall
    replay: ReplaySettings | None = None  # a trace's records instead of invented load
    probes: ProbeSettings | None = None  # eval items and consistency prompts in the load

    # processes
    workers: int
    shard: tuple[int, int]  # (index, count)
    sync_dir: Path | None
    sync_timeout_s: float

    # results
    summary: SummarySettings  # what the figures are judged against; its seed seeds the load
    gpu_metrics: tuple[str, ...]  # DCGM-style /metrics URLs to sample
    gpu_interval_s: float
    server_metrics: tuple[str, ...]  # Prometheus /metrics URLs sampled around each block
    trace_url: str | None  # a link template with {trace_id}, for report.md's slowest requests
    progress: bool  # draw the live progress line

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)  # Path -> str

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data: dict[str, Any] = json.loads(text)
        return cls(
            **data
            | {
                "out": Path(data["out"]),
                "targets": tuple(data["targets"]),
                "input_tokens": Lengths(**data["input_tokens"]),
                "output_tokens": Lengths(**data["output_tokens"]),
                "think_time": Durations(**data["think_time"]),
                "levels": tuple(data["levels"]),
                "shard": tuple(data["shard"]),
                "sync_dir": Path(data["sync_dir"]) if data["sync_dir"] else None,
                "summary": SummarySettings(**data["summary"]),
                "settle": Settle(**data["settle"]) if data.get("settle") else None,
                "replay": ReplaySettings(**data["replay"]) if data.get("replay") else None,
                "probes": ProbeSettings(**data["probes"]) if data.get("probes") else None,
                "gpu_metrics": tuple(data["gpu_metrics"]),
                "server_metrics": tuple(data["server_metrics"]),
            }
        )
