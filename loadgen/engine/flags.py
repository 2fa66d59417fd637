"""A load run's flags, each defined once: its name, parser, default, and help that shows the
default from its value. WORKLOAD, REQUESTS and RESULTS both engines take (loadgen's parser
and the Locust engine's custom arguments); the other groups are loadgen's alone: CHECKED
because answers are scored and compared by its asyncio runner (engine/probes.py), which the
Locust engine's gevent workers are not. The few flags whose help names a run's defaults
(loadgen/runs/config.py: levels, duration, warm-up) stay in loadgen/commands/cli.py, above.

The Locust engine keeps values as text (a master hands its custom arguments to its workers
through msgpack, its web UI hands a form back as text); `read` parses either form.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from latency_proxy.base.units import format_duration
from latency_proxy.measure.meter import STALL_THRESHOLD_S
from loadgen.analysis.slo import default_slos
from loadgen.engine.schedule import ARRIVALS
from loadgen.engine.window import DRAIN_MIN_S
from loadgen.engine.workload import NO_THINK, Durations, Lengths
from loadgen.inputs import bounds


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: `parse` reads its text; `shown` writes its default as a user would type it."""

    name: str
    help: str
    parse: Callable[[str], Any] | None = None
    default: Any = None
    shown: Callable[[Any], str] = str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")

    def add(self, group: argparse._ArgumentGroup, *, text: bool) -> None:
        kwargs: dict[str, Any] = dict(self.options)
        help_text = self.help
        if self.default is not None and "action" not in kwargs:
            help_text += f" (default {self.shown(self.default)})"
        if self.parse is not None:
            if text:
                default = None if self.default is None else self.shown(self.default)
            else:
                kwargs["type"] = self.parse
                default = self.default
            kwargs["default"] = default
        elif "default" not in kwargs and self.default is not None:
            kwargs["default"] = self.default
        group.add_argument(self.name, help=help_text, **kwargs)


def _lengths(value: Lengths) -> str:
    return str(value.low) if value.low == value.high else f"{value.low}-{value.high}"


def _durations(value: Durations) -> str:
    low, high = format_duration(value.low), format_duration(value.high)
    return low if value.low == value.high else f"{low}-{high}"


FLAGS = {
    flag.name: flag
    for flag in (
        Flag("--endpoint", "the OpenAI API to call", default="chat",
             options={"choices": ("chat", "completions")}),
        Flag("--input-tokens", "prompt length", Lengths.parse, Lengths(512, 512), _lengths,
             {"metavar": "N|LO-HI"}),
        Flag("--output-tokens", "max_tokens", Lengths.parse, Lengths(64, 64), _lengths,
             {"metavar": "N|LO-HI"}),
        Flag("--ignore-eos", "ask vLLM to produce exactly max_tokens (default on)",
             options={"action": argparse.BooleanOptionalAction, "default": True}),
        Flag("--temperature", "sampling temperature", bounds.real(0, 100, "a temperature"), 0.0,
             lambda v: f"{v:g}"),
        Flag("--dataset", "JSONL of {prompt} or {messages}, or ShareGPT JSON",
             options={"metavar": "FILE"}),
        Flag("--tokenizer",
             "size synthetic prompts with this local tokenizer instead of /tokenize (it has no "
             "chat template: chat prompts then come out longer by the template)",
             options={"metavar": "tokenizer.json"}),
        Flag("--prompt-seed",
             "seed the synthetic prompts' words (default: fresh for every run, recorded in "
             "run.json, so no prefix cache has seen them; --seed repeats lengths and arrivals)",
             bounds.SEED, options={"metavar": "N"}),
        Flag("--shared-prefix-tokens",
             "every synthetic prompt opens with the same N tokens (a system prompt), drawn "
             "once per run: what a server's prefix cache buys",
             bounds.count(0, bounds.MAX_TOKENS, "a token count"), 0,
             options={"metavar": "N"}),
        Flag("--seed", "seeds lengths and arrivals (with a worker's index)", bounds.SEED, 0),
        Flag("--timeout", "per request", bounds.duration(), 600.0, format_duration,
             {"metavar": "DURATION"}),
        Flag("--drain",
             "after the measured window closes, its requests may run on this long; those "
             "still running then are ended, counted as unfinished and left out of the "
             f"percentiles (default: as long as the window, at least "
             f"{format_duration(DRAIN_MIN_S)})",
             bounds.duration(), options={"metavar": "DURATION"}),
        Flag("--stall-threshold",
             "a gap between tokens longer than this counts as a stall, as the proxy's",
             bounds.duration(), STALL_THRESHOLD_S, format_duration, {"metavar": "DURATION"}),
        Flag("--slo",
             "ttft, tpot or e2e, a limit above 0 judged at a percentile where a level is judged; "
             "given any, "
             f"exactly those are judged (none given: {default_slos()}); goodput counts "
             "requests within the limits",
             options={"action": "append", "default": [], "metavar": "METRIC=DURATION[@pNN]"}),
        Flag("--max-send-lag", "client send lag P99 above this marks the run invalid",
             bounds.duration(), 0.025, format_duration, {"metavar": "DURATION"}),
        Flag("--max-loop-lag", "client event-loop lag P99 above this marks it invalid",
             bounds.duration(), 0.025, format_duration, {"metavar": "DURATION"}),
        Flag("--out", "the run directory (default loadgen-runs/<time>)",
             options={"metavar": "DIR"}),
        Flag("--eval",
             "check answers under the load: a JSON-lines file of {messages|prompt, answer, "
             "match, max_tokens}, or a built-in canary (builtin:arithmetic, builtin:copy), "
             "sent greedy; summary.json gets each target's accuracy with its 95%% interval",
             options={"metavar": "FILE|builtin:NAME"}),
        Flag("--eval-fraction",
             "share of each target's requests that are eval items, in (0, 1]; below 1 the "
             "rest is the ordinary workload (default 1: every request)",
             bounds.real(0, 1, "a share of requests", zero_ok=False), options={"metavar": "F"}),
        Flag("--consistency",
             "send N fixed prompts greedy alone first, then again inside the load: the share "
             "whose output is identical, and where the others first differ",
             bounds.count(0, 10_000, "a prompt count"), 0,
             options={"metavar": "N"}),
        Flag("--content-capture",
             "keep eval and consistency outputs (and the expected text) in requests.jsonl; "
             "off: only ids, verdicts, keyed hashes and positions are written",
             options={"action": "store_true"}),
        Flag("--gpu-hour-price",
             "price of one GPU for an hour: with --gpus, $ per million output and input "
             "tokens at the measured throughput",
             bounds.real(0, 1_000_000, "a price in USD", zero_ok=False),
             options={"metavar": "USD"}),
        Flag("--trace-url",
             "a link to a trace with {trace_id} in it (Grafana Explore, Tempo): report.md "
             "and report.html link the slowest requests to their traces",
             options={"metavar": "TEMPLATE"}),
        # loadgen's own from here: what it targets, how a conversation goes on, how the load
        # is spread, what it reads beside the run, and the capacity search's
        Flag("--target",
             "a base URL, proxy ($LATENCY_PROXY_URL or http://127.0.0.1:8080), direct "
             "($VLLM_URL or http://127.0.0.1:8000) or a --targets-file name; repeat to "
             "compare (default: proxy)",
             options={"action": "append", "default": [], "metavar": "URL|NAME"}),
        Flag("--targets-file", "named targets (see examples/)", options={"metavar": "FILE.toml"}),
        Flag("--virtual-args",
             "with --target virtual:PRESET (the simulator's virtual clock: predicted figures, "
             'no load sent): vLLM engine flags applied to the preset, e.g. "--max-num-seqs 128"; '
             'with a bare --target virtual: the GPU and model too, e.g. "--gpu h100-sxm '
             '--model-config config.json -tp 2"',
             options={"default": "", "metavar": "FLAGS"}),
        Flag("--virtual-replicas",
             "with --target virtual:PRESET: replicas of it, each request sent to the "
             "least-loaded",
             bounds.count(1, 1000, "a replica count"), 1, options={"metavar": "N"}),
        Flag("--virtual-budget",
             "with --target virtual:PRESET: refuse a run estimated to take longer to simulate "
             "(its requests counted before it starts, ~2 ms each)",
             bounds.duration(), 300.0, format_duration, {"metavar": "DURATION"}),
        Flag("--model", "model to ask for (default: the target's, else /v1/models)"),
        Flag("--embedded",
             "start the simulator and the proxy on free loopback ports; proxy and "
             "direct then name them, and --target proxy measures direct as well",
             options={"action": "store_true"}),
        Flag("--turns",
             "conversations of N requests: turn k resends the whole conversation so far "
             "(the model's answers included) plus a new user message (chat only)",
             bounds.count(1, 10_000, "a turn count"), 1, options={"metavar": "N"}),
        Flag("--think-time", "a user's pause between an answer and the next turn",
             Durations.parse, NO_THINK, _durations, {"metavar": "D|LO-HI"}),
        Flag("--arrival", "", options={"choices": ARRIVALS, "default": "poisson"}),
        Flag("--gamma-shape", "burstiness of --arrival gamma (<1 burstier than poisson)",
             bounds.real(0, 1000, "a gamma shape", zero_ok=False), 0.5, lambda v: f"{v:g}"),
        Flag("--requests", "measured requests per target and level", bounds.REQUESTS),
        Flag("--blocks",
             "interleaved blocks per target (default 1, or 2 with several: A, B, A, B)",
             bounds.count(1, 1000, "a block count")),
        Flag("--workers", "spread the load over N processes, one merged result",
             bounds.count(1, 1024, "a worker count"), 1),
        Flag("--shard",
             "run shard i of N (or N, index from $JOB_COMPLETION_INDEX); combine with `merge`",
             bounds.shard, options={"metavar": "i/N"}),
        Flag("--sync-dir",
             "shards wait for each other in DIR (a shared volume; fresh per run) and start "
             "their load at the same moment (--workers does this on its own)",
             options={"metavar": "DIR"}),
        Flag("--sync-timeout", "how long a shard waits for the others in --sync-dir",
             bounds.duration(), 600.0, format_duration),
        Flag("--slice",
             "summary.json gets each target's run in slices of this length (sent, finished, "
             "backlog, output tok/s, TTFT/TPOT P50/P90), report.md its worst slice, a plot",
             bounds.duration(), options={"metavar": "DURATION"}),
        Flag("--gpu-metrics", "a DCGM exporter's /metrics to sample (repeatable)",
             options={"action": "append", "default": [], "metavar": "URL"}),
        Flag("--gpu-interval", "how often --gpu-metrics are sampled",
             bounds.duration(), 1.0, format_duration),
        Flag("--server-metrics",
             "a Prometheus /metrics (vLLM's, the proxy's admin port) to sample when each "
             "block's measured window opens and closes: where the time went (repeatable)",
             options={"action": "append", "default": [], "metavar": "URL"}),
        Flag("--weight-bytes", "model weights, e.g. 140GB (for MBU)",
             bounds.size(1, 10**15, "a size")),
        Flag("--kv-bytes-per-token", "KV-cache bytes a token of context holds (for MBU)",
             bounds.size(0, 10**9, "a size"), 0),
        Flag("--gpu-bandwidth", "peak memory bandwidth per GPU, e.g. 2039GB (for MBU)",
             bounds.size(1, 10**15, "a bandwidth"), options={"metavar": "BYTES_PER_S"}),
        Flag("--gpus",
             "GPUs serving each target: MBU, the report's output tok/s per GPU, and the "
             "cost with --gpu-hour-price",
             bounds.count(1, 100_000, "a GPU count"), 1),
        Flag("--progress", "live progress line (default: when stderr is a terminal)",
             options={"action": argparse.BooleanOptionalAction, "default": None}),
        Flag("--by",
             "search open-loop requests/s (default), closed-loop streams, or how much faster "
             "than recorded a --replay's trace can go (speed)",
             options={"choices": ("rate", "concurrency", "speed"), "default": "rate"}),
        Flag("--start", "the first level probed",
             bounds.real(0, 100_000, "a level", zero_ok=False), 1.0,
             lambda v: f"{v:g} req/s, or {v:g} stream", {"metavar": "LEVEL"}),
        Flag("--floor",
             "halve down to this level before giving up (default --start / 8; --start "
             "itself: a start that does not meet ends the search)",
             bounds.real(0, 100_000, "a level", zero_ok=False), options={"metavar": "LEVEL"}),
        Flag("--ceiling",
             "double up to this level at most (default: no end; --start itself: a check of "
             "that one level)",
             bounds.real(0, 100_000, "a level", zero_ok=False), options={"metavar": "LEVEL"}),
        Flag("--budget", "stop searching when the next probe would end past this",
             bounds.duration(), 900.0, format_duration),
        Flag("--repeat",
             "then re-run each final bracket's ends N times with new seeds and report the "
             "spread of the capacity figure (outside --budget)",
             bounds.count(0, 1000, "a repeat count"), 0, options={"metavar": "N"}),
        Flag("--probe-pngs",
             "draw each probe's PNG charts beside its report.md, about a third of a search's "
             "CPU on the virtual clock; report.html draws its charts either way, and "
             "`python -m loadgen report DIR` draws the PNGs later (default: yes; no for a "
             "plan's searches)",
             options={"action": argparse.BooleanOptionalAction, "default": None}),
        # the plan's: which deployments to weigh, what they cost, how many to buy
        Flag("--candidates",
             "the deployments to weigh: presets, engine flags to vary, prices per GPU-hour, "
             "the bound on replicas (see docs: Plan)",
             options={"metavar": "PLAN.toml"}),
        Flag("--models",
             "build candidates from the GPU catalogue: each a preset (its model shape, engine "
             "and efficiencies) or a model's config.json (its shape), put on every "
             "--gpu-types x --tensor-parallel x --dtypes",
             options={"metavar": "PRESET|CONFIG.json[,…]"}),
        Flag("--tensor-parallel", "with --models: GPUs per replica to try (default 1,2,4,8)",
             bounds.levels(bounds.count(1, 64, "a GPU count")), options={"metavar": "N[,N…]"}),
        Flag("--gpu-types",
             "weigh only candidates on these GPUs (catalogue ids or aliases: a100,h100); "
             "without --candidates or --models, every bundled preset on them",
             options={"metavar": "GPU[,GPU…]"}),
        Flag("--dtypes",
             "weigh only candidates whose weights are stored so (bf16, fp16, fp8, int8, awq, "
             "gptq)",
             options={"metavar": "DTYPE[,DTYPE…]"}),
        Flag("--gpu-prices",
             "USD per GPU-hour, by GPU (beside or instead of PLAN.toml's [prices])",
             options={"metavar": "GPU=USD[,…]"}),
        Flag("--twin",
             "a fitted preset (python -m loadgen.sim fit): candidates on its GPU and model "
             "are predicted with it, others of its model carry its efficiencies over",
             options={"metavar": "FITTED.toml"}),
        Flag("--headroom",
             "buy enough replicas that the traffic can grow this share before an SLO breaks",
             bounds.real(0, 10, "a share of the traffic"), 0.0, lambda v: f"{v:g}",
             {"metavar": "H"}),
        Flag("--max-replicas", "the most replicas of one candidate (default: PLAN.toml's, else 64)",
             bounds.count(1, 1000, "a replica count"), options={"metavar": "N"}),
        Flag("--jobs", "candidates searched at once, each in its own process (default: the "
             "cores, or with --ray the cluster's CPUs)",
             bounds.count(1, 256, "a process count"), options={"metavar": "N"}),
        Flag("--ray",
             "size the candidates on a Ray cluster: its address (ray://HEAD:10001, or auto "
             "for the one this machine has joined), or local to start one here; needs the "
             "ray extra, and latency-proxy installed on every node",
             options={"metavar": "ADDRESS"}),
    )
}  # fmt: skip

WORKLOAD = ("--endpoint", "--input-tokens", "--output-tokens", "--ignore-eos", "--temperature",
            "--dataset", "--tokenizer", "--prompt-seed", "--shared-prefix-tokens")  # fmt: skip
REQUESTS = ("--timeout", "--drain", "--stall-threshold", "--seed")
RESULTS = ("--out", "--slo", "--trace-url", "--max-send-lag", "--max-loop-lag")
CHECKED = ("--eval", "--eval-fraction", "--consistency", "--content-capture", "--gpu-hour-price")
TARGETS = ("--target", "--targets-file", "--virtual-args", "--virtual-replicas",
           "--virtual-budget", "--model", "--embedded")  # fmt: skip
CONVERSATION = ("--turns", "--think-time")
SPREAD = ("--blocks", "--workers", "--shard", "--sync-dir", "--sync-timeout")
READ_BESIDE = ("--slice", "--gpu-metrics", "--gpu-interval", "--server-metrics", "--weight-bytes",
               "--kv-bytes-per-token", "--gpu-bandwidth", "--gpus", "--progress")  # fmt: skip
SEARCH = ("--by", "--start", "--floor", "--ceiling", "--budget", "--repeat", "--probe-pngs")
PLAN = ("--candidates", "--models", "--tensor-parallel", "--gpu-types", "--dtypes",
        "--gpu-prices", "--twin", "--headroom", "--max-replicas", "--jobs", "--ray")  # fmt: skip


def add(group: argparse._ArgumentGroup, names: Iterable[str], *, text: bool = False) -> None:
    """Add the named flags to a parser's group; `text` keeps their values text (Locust)."""
    for name in names:
        FLAGS[name].add(group, text=text)


def defaults(names: Iterable[str]) -> dict[str, Any]:
    """The named flags' values when not given, by destination: for a parser that does not
    offer them but whose arguments are read as if it did."""
    out = {}
    for name in names:
        flag = FLAGS[name]
        out[flag.dest] = flag.options.get("default", flag.default)
    return out


def shown(name: str) -> str:
    """A flag's default as a user would type it."""
    flag = FLAGS[name]
    return flag.shown(flag.default)


def read(args: Any, name: str) -> Any:
    """A flag's value from parsed arguments, parsed when it is still text."""
    flag = FLAGS[name]
    value = getattr(args, flag.dest)
    return value if flag.parse is None else bounds.parsed(value, flag.parse, name)
