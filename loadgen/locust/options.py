"""The Locust engine's custom arguments: loadgen's workload and result flags, with
loadgen's names and meaning, and `Options`, the same typed once per test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.analysis.records import SummarySettings
from loadgen.analysis.slo import parse_slos
from loadgen.engine import flags
from loadgen.engine.workload import Lengths
from loadgen.inputs import bounds
from loadgen.replay import ReplaySettings
from loadgen.replay import flags as replay_flags

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser


def add_arguments(parser: LocustArgumentParser) -> None:
    """loadgen's workload and result flags, with loadgen's names (strings on the wire: Locust
    hands a master's custom arguments to its workers through msgpack)."""
    g = parser.add_argument_group("loadgen", "loadgen's workload and results (see loadgen's docs)")
    flags.add(g, flags.WORKLOAD, text=True)
    g.add_argument("--model", help="model to ask for (default: the first at /v1/models)")
    flags.add(g, flags.REQUESTS, text=True)
    g.add_argument("--warmup", default="0s", help="excluded from results (default 0s)")
    flags.add(g, flags.RESULTS, text=True)
    r = parser.add_argument_group("loadgen replay", "a trace's requests, each at its own time")
    replay_flags.add_flags(r, text=True)
    r.add_argument("--duration", metavar="D", help="the replay's window: this much trace time")
    r.add_argument("--requests", metavar="N", help="the replay's window: this many records")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """The custom arguments, typed (loadgen's parsers), read once per test."""

    endpoint: str
    model: str | None
    input_tokens: Lengths
    output_tokens: Lengths
    ignore_eos: bool
    temperature: float
    dataset: str | None
    tokenizer: str | None
    prompt_seed: int
    shared_prefix_tokens: int
    warmup_s: float
    timeout_s: float
    drain_s: float | None  # None: the window's length, at least window.DRAIN_MIN_S
    stall_threshold_s: float
    summary: SummarySettings
    out: Path | None
    trace_url: str | None
    replay: ReplaySettings | None
    duration_s: float | None  # the replay's window, in trace time
    requests: int | None  # ... or in records

    @classmethod
    def of(cls, ns: Any) -> Options:
        """The custom arguments, typed; ValueError for a bad one."""
        slos = parse_slos(ns.slo)
        replay = replay_flags.settings(ns)
        duration_s, requests = _window(ns.duration or None, ns.requests or None)
        if replay is None and (duration_s, requests) != (None, None):
            raise ValueError(
                "--duration and --requests are a --replay's window (Locust's -t is a test's length)"
            )
        return cls(
            endpoint=ns.endpoint,
            model=ns.model or None,
            input_tokens=flags.read(ns, "--input-tokens"),
            output_tokens=flags.read(ns, "--output-tokens"),
            ignore_eos=ns.ignore_eos,
            temperature=flags.read(ns, "--temperature"),
            dataset=ns.dataset or None,
            tokenizer=ns.tokenizer or None,
            prompt_seed=flags.read(ns, "--prompt-seed"),
            shared_prefix_tokens=flags.read(ns, "--shared-prefix-tokens"),
            warmup_s=bounds.parsed(ns.warmup, bounds.duration(positive=False), "--warmup"),
            timeout_s=flags.read(ns, "--timeout"),
            drain_s=flags.read(ns, "--drain"),
            stall_threshold_s=flags.read(ns, "--stall-threshold"),
            summary=SummarySettings(
                slo=slos.limits,
                slo_percentiles=slos.percentiles,
                max_send_lag_s=flags.read(ns, "--max-send-lag"),
                max_loop_lag_s=flags.read(ns, "--max-loop-lag"),
                seed=flags.read(ns, "--seed"),
            ),
            out=Path(ns.out) if ns.out else None,
            trace_url=ns.trace_url or None,
            replay=replay,
            duration_s=duration_s,
            requests=requests,
        )


def _window(duration: str | None, requests: str | None) -> tuple[float | None, int | None]:
    """--duration and --requests, as loadgen reads them: one or neither."""
    if duration is not None and requests is not None:
        raise ValueError("give --duration or --requests, not both")
    count = bounds.parsed(requests, bounds.REQUESTS, "--requests")
    return bounds.parsed(duration, bounds.duration(), "--duration"), count
