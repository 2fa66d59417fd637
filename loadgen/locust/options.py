"""The Locust engine's custom arguments: loadgen's workload and result flags, with
loadgen's names and meaning, and `Options`, the same typed once per test."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latency_proxy.units import parse_duration
from loadgen.records import SummarySettings
from loadgen.slo import parse_slos
from loadgen.workload import Lengths

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
    g.add_argument("--slo", action="append", default=[], metavar="METRIC=DURATION")
    g.add_argument("--max-send-lag", default="25ms", help="send lag P99 above: invalid")
    g.add_argument("--max-loop-lag", default="25ms", help="scheduling lag P99 above: invalid")
    g.add_argument("--out", metavar="DIR", help="the run directory (default loadgen-runs/<time>)")
    g.add_argument("--trace-url", metavar="TEMPLATE", help="links with {trace_id} in report.md")


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
    summary: SummarySettings
    out: Path | None
    trace_url: str | None

    @classmethod
    def of(cls, ns: Any) -> Options:
        slos = parse_slos(ns.slo)
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
            summary=SummarySettings(
                slo=slos.limits,
                slo_percentiles=slos.percentiles,
                max_send_lag_s=parse_duration(ns.max_send_lag),
                max_loop_lag_s=parse_duration(ns.max_loop_lag),
                seed=ns.seed,
            ),
            out=Path(ns.out) if ns.out else None,
            trace_url=ns.trace_url or None,
        )
