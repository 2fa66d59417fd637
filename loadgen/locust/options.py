"""The Locust engine's custom arguments: loadgen's workload and result flags, with
loadgen's names and meaning, and `Options`, the same typed once per test."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latency_proxy.measure.meter import STALL_THRESHOLD_S
from latency_proxy.units import parse_duration
from loadgen.analysis.records import SummarySettings
from loadgen.analysis.slo import parse_slos
from loadgen.engine.workload import Lengths
from loadgen.replay import ReplaySettings
from loadgen.replay import flags as replay_flags

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser


def add_arguments(parser: LocustArgumentParser) -> None:
    """loadgen's workload and result flags, with loadgen's names (strings on the wire: Locust
    hands a master's custom arguments to its workers through msgpack)."""
    g = parser.add_argument_group("loadgen", "loadgen's workload and results (see loadgen's docs)")
    g.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    g.add_argument("--model", help="model to ask for (default: the first at /v1/models)")
    g.add_argument("--input-tokens", default="512", metavar="N|LO-HI", help="prompt length")
    g.add_argument("--output-tokens", default="64", metavar="N|LO-HI", help="max_tokens")
    g.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--dataset", metavar="FILE", help="JSONL of {prompt} or {messages}, or ShareGPT")
    g.add_argument("--tokenizer", metavar="tokenizer.json", help="size prompts with this")
    g.add_argument(
        "--prompt-seed", type=int, help="seed the prompts' words (default: fresh for every run)"
    )
    g.add_argument("--shared-prefix-tokens", type=int, default=0, metavar="N")
    g.add_argument("--seed", type=int, default=0, help="seeds lengths (with the worker index)")
    g.add_argument("--warmup", default="0s", help="excluded from results")
    g.add_argument("--timeout", default="600s", help="per request")
    g.add_argument(
        "--stall-threshold",
        default=f"{STALL_THRESHOLD_S:g}s",
        help="a gap between tokens longer than this counts as a stall",
    )
    g.add_argument("--slo", action="append", default=[], metavar="METRIC=DURATION")
    g.add_argument("--max-send-lag", default="25ms", help="send lag P99 above: invalid")
    g.add_argument("--max-loop-lag", default="25ms", help="scheduling lag P99 above: invalid")
    g.add_argument("--out", metavar="DIR", help="the run directory (default loadgen-runs/<time>)")
    g.add_argument("--trace-url", metavar="TEMPLATE", help="links with {trace_id} in report.md")
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
            input_tokens=Lengths.parse(ns.input_tokens),
            output_tokens=Lengths.parse(ns.output_tokens),
            ignore_eos=ns.ignore_eos,
            temperature=ns.temperature,
            dataset=ns.dataset or None,
            tokenizer=ns.tokenizer or None,
            prompt_seed=ns.prompt_seed,
            shared_prefix_tokens=ns.shared_prefix_tokens,
            warmup_s=parse_duration(ns.warmup),
            timeout_s=parse_duration(ns.timeout),
            stall_threshold_s=parse_duration(ns.stall_threshold),
            summary=SummarySettings(
                slo=slos.limits,
                slo_percentiles=slos.percentiles,
                max_send_lag_s=parse_duration(ns.max_send_lag),
                max_loop_lag_s=parse_duration(ns.max_loop_lag),
                seed=ns.seed,
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
    try:
        count = int(requests) if requests is not None else None
    except ValueError:
        raise ValueError(f"--requests is not a whole number: {requests!r}") from None
    return (parse_duration(duration) if duration is not None else None), count
