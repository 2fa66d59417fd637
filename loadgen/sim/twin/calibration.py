"""The simulator against published measurements: the same setups replayed on a virtual clock.
Pure, no I/O: the engine's scheduler and performance model, stepped without waiting.

Qwen's speed benchmark (QwenLM/Qwen2.5, docs/source/benchmark/speed_benchmark.rst, the
"72B (vLLM)" table; its script examples/speed-benchmark/speed_benchmark_vllm.py):
Qwen2.5-72B-Instruct in BF16 on 4×A100-80GB, vLLM 0.6.3 through its offline `LLM` class,
batch 1, 2,048 output tokens; speed = 2,048 / the time of the whole `generate` call, prefill
included. Settings: gpu_memory_utilization 0.9 and max_model_len 32,768 ("Default"), or
65,536 for the 63,488-token input ("Setting 4", with YaRN: rope_scaling factor 4 over
32,768 positions, given here as vLLM's --hf-overrides). vLLM 0.6.3 (V0) then ran without prefix
caching and, at 32,768, without chunked prefill (so one step of max(max_model_len, 2048)
tokens takes the whole prompt); above 32K it turned chunked prefill on by itself with a
512-token budget (vLLM PR #6666; the default became 2,048 only in PR #10544, after 0.6.3).

lmdeploy's static inference benchmark (InternLM/lmdeploy, docs/en/benchmark/a100_fp16.md as
first published, commit ebe90bc94, lmdeploy v0.1.0a1: table "llama2-70b", lines 97-118; the
script benchmark/profile_generation.py of that commit, whose defaults, concurrency 1 16 32 64
and 6 test rounds, are the table's rows): Llama-2-70B in fp16 on 4×A100-80GB (tp 4), served
by TurboMind, lmdeploy's own engine, not vLLM. `concurrency` threads each send 6 identical
requests one after another (ignore_eos, fixed prompt and output lengths); FTL is the mean
time to first token over all requests, the per-token latency's 50th percentile is over every
gap after the first token, throughput is all output tokens over the run's time. The replay
serves the same closed loop with the preset's own engine (vLLM's scheduler), no prefix
cache (TurboMind 0.1.0 had none, and the benchmark's prompt is the same for every request)
and TurboMind's CPU cost per sequence (TURBOMIND_SEQUENCE_OVERHEAD).

vLLM's own serving benchmark on PCIe A100s (surajssd's public gist
eef8ebf83cadd690f6fb4ee87b30fe1a, https://gist.github.com/surajssd/eef8ebf83cadd690f6fb4ee87b30fe1a,
the "serving" table of vLLM's nightly benchmark suite as run by its author):
Llama-3.3-70B-Instruct, tp 4 pp 1, on one Azure Standard_NC96ads_A100_v4 (four A100 80GB PCIe,
no NVLink: MicrosoftDocs/azure-docs articles/virtual-machines/nc-a100-v4-series.md), 200
ShareGPT prompts with a fixed seed, Poisson arrivals at 1 and 4 QPS, vLLM serve's defaults.
Only the QPS 1 and QPS 4 rows were retrievable here (the table's 16 and inf rows were not):
those two are replayed, no others are assumed. The author's TP2×PP2 and TP4×PP2 siblings
(gists 9e99362736af03575a8c34b46ac8e1bc, c8bbcb244b210a3607ad952a7bdda759) pipeline across
two VMs, which the simulator does not model: recorded in docs/sim/calibration.md, not
replayed. ShareGPT itself is not available here either, so the replay draws the
200 lengths from a log-normal (σ 1.0, vLLM's ShareGPT filter: 4 ≤ each, prompt ≤ 1,024,
prompt + output ≤ 2,048) scaled to the means the published throughputs imply (213.3 input,
213.9 output tokens per request), and reports the median over REPLAY_SEEDS draws.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from loadgen.sim.model import presets
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch, EngineConfig
from loadgen.sim.model.sequence import Seq
from loadgen.sim.twin import cluster
from loadgen.sim.vllm_flags.engine import apply_flags
from loadgen.sim.vllm_flags.table import add_arguments

TOLERANCE = 0.10  # the simulator must land within 10% of every Qwen point (and see below)
QWEN_SOURCE = "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst, 72B (vLLM), BF16, 4 GPUs"
QWEN_OUTPUT_TOKENS = 2048
# Qwen2.5's README for inputs past 32,768 tokens: config.json's rope_scaling, as YaRN
QWEN_YARN = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
QWEN_SPEED = {1: 31.37, 6144: 29.90, 14336: 30.10, 30720: 27.53, 63488: 20.74}  # tokens/s

# Under load, against vLLM itself: the median TTFT within TTFT_TOLERANCE, the median TPOT
# within TOLERANCE, at every published level. Against TurboMind (another engine) TPOT within
# TOLERANCE, TTFT within the stated LMDEPLOY_TTFT_BAND: its scheduler keeps a burst of
# identical requests in lockstep round after round, vLLM's lets them drift apart (see
# docs/sim/calibration.md), so a burst's mean TTFT is the schedulers', not the GPUs'.
TTFT_TOLERANCE = 0.25
LMDEPLOY_TTFT_BAND = (-0.90, 0.25)
LMDEPLOY_SOURCE = (
    "InternLM/lmdeploy docs/en/benchmark/a100_fp16.md (commit ebe90bc94, v0.1.0a1), "
    "llama2-70b static inference, TurboMind, fp16, tp 4, A100-80G"
)
# TurboMind's CPU cost per running sequence per step, read off the table: its decode step
# grows by ~0.08 ms per sequence beyond what the KV reads explain (vLLM's is smaller, see
# the presets' sequence_overhead and docs/sim/calibration.md).
TURBOMIND_SEQUENCE_OVERHEAD = 80e-6
LMDEPLOY_ROUNDS = 6  # profile_generation.py's --test-round default: requests per thread
# (concurrency, prompt tokens, output tokens): (out tok/s, FTL ave s, per-token 50% s)
LMDEPLOY_LLAMA2_70B = {
    (1, 128, 2048): (32.38, 0.074, 0.031),
    (16, 128, 2048): (482.99, 0.403, 0.033),
    (32, 128, 2048): (853.56, 0.732, 0.036),
    (64, 128, 2048): (1391.8, 1.173, 0.043),
    (1, 2048, 2048): (31.9, 0.405, 0.031),
    (16, 2048, 2048): (399.42, 5.773, 0.036),
    (32, 2048, 2048): (636.23, 11.711, 0.043),
    (64, 2048, 2048): (930.46, 21.29, 0.055),
}


VLLM_PCIE_SOURCE = (
    "gist.github.com/surajssd/eef8ebf83cadd690f6fb4ee87b30fe1a, vLLM serving benchmark, "
    "Llama-3.3-70B-Instruct tp4, Standard_NC96ads_A100_v4 (4×A100 80GB PCIe), ShareGPT 200"
)
VLLM_PCIE_REQUESTS = 200
# tokens in and out per request: (total − output tok/s) / req/s and output tok/s / req/s
VLLM_PCIE_MEAN_LENGTHS = (213.3, 213.9)
REPLAY_SEEDS = (0, 1, 2)
# qps: the table's figures (ms, but req/s), as published; the table also gives P99s and ITL
# means (TTFT P99 376.548 and 606.801, TPOT P99 58.0394 and 129.354, ITL mean 44.8516 and
# 69.5497), printed by no replay here: a P99 of 200 requests is two requests.
VLLM_PCIE_LLAMA33_70B = {
    1: {
        "req/s": 0.927978,
        "TTFT mean": 154.771,
        "TTFT median": 128.388,
        "TPOT mean": 44.9394,
        "TPOT median": 44.6347,
        "ITL median": 43.878,
    },
    4: {
        "req/s": 2.4957,
        "TTFT mean": 246.338,
        "TTFT median": 219.599,
        "TPOT mean": 73.9558,
        "TPOT median": 73.8304,
        "ITL median": 55.5315,
    },
}


@dataclass(frozen=True, slots=True)
class Point:
    setup: str
    published: float
    simulated: float
    unit: str

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1


@dataclass(frozen=True, slots=True)
class Load:
    """One published row under concurrent load, each of its figures against the simulator's."""

    concurrency: int
    ttft: Point  # mean
    tpot: Point  # 50th percentile of the gaps after the first token
    throughput: Point  # output tokens/s


@dataclass(frozen=True, slots=True)
class Rate:
    """One published row at a request rate: the checked medians, and the other figures."""

    qps: float
    ttft: Point  # median
    tpot: Point  # median
    others: tuple[Point, ...]


@dataclass(slots=True)
class Trace:
    finished: list[Seq] = field(default_factory=list)  # in the order they finished
    gaps: list[float] = field(default_factory=list)  # every inter-token gap, seconds
    elapsed: float = 0.0  # virtual seconds from 0 to the last step's end
    # when each request was sent: a Seq's `arrival` becomes the engine's once a front end
    # (frontend.py) has had it, and a client's TTFT counts from the sending
    sent: dict[Seq, float] = field(default_factory=dict)

    def ttft(self, seq: Seq) -> float | None:
        if seq.first_token_at is None:
            return None
        return seq.first_token_at - self.sent[seq]


def replay(
    preset: Preset,
    seqs: Iterable[Seq],
    follow_up: Callable[[Seq, float], Seq | None] = lambda seq, now: None,
) -> Trace:
    """Run `seqs` (arrival times set) through the preset's engine on a virtual clock
    (cluster.py), as realtime/batching.py does in real time. `follow_up(seq, now)` is told of each
    finished request and may return the next one, arriving `now` (a client in a closed loop)."""
    trace = Trace()
    seqs = list(seqs)
    trace.sent = {seq: seq.arrival for seq in seqs}

    def sending(done: Seq, now: float) -> list[Seq]:
        nxt = follow_up(done, now)
        if nxt is None:
            return []
        trace.sent[nxt] = nxt.arrival
        return [nxt]

    def observe(
        _replica: int, _batch: Batch, _step: StepTime, _now: float, sampled: cluster.Sampled
    ) -> None:
        for seq, gap in sampled:
            if gap is not None:
                trace.gaps.append(gap)
            if seq.finished:
                trace.finished.append(seq)

    trace.elapsed = cluster.replay(preset, seqs, sending, observe)
    return trace


def closed_loop(preset: Preset, clients: int, rounds: int, prompt: int, output: int) -> Trace:
    """`clients` clients that each send `rounds` requests, the next as the last finishes."""
    left: dict[Seq, int] = {Seq(prompt, output, 0.0): rounds - 1 for _ in range(clients)}

    def follow_up(done: Seq, now: float) -> Seq | None:
        rest = left.pop(done)
        if not rest:
            return None
        seq = Seq(prompt, output, now)
        left[seq] = rest - 1
        return seq

    return replay(preset, list(left), follow_up)


def vllm_063_offline(preset: Preset, max_model_len: int) -> Preset:
    """The preset as vLLM 0.6.3's `LLM(...)` configured itself for this max_model_len; past
    the model's 32,768 positions with Qwen's YaRN override (QWEN_YARN), as the source ran it,
    through the same flag check as `python -m loadgen.sim`."""
    chunked = max_model_len > 32768
    flags = ["--max-model-len", str(max_model_len)]
    if chunked:
        flags += ["--hf-overrides", json.dumps({"rope_scaling": QWEN_YARN})]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    preset, _ = apply_flags(preset, parser.parse_args(flags), env={})
    engine = EngineConfig(
        max_num_seqs=256,
        max_num_batched_tokens=512 if chunked else max(max_model_len, 2048),
        gpu_memory_utilization=0.9,
        block_size=16,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=False,
    )
    return dataclasses.replace(preset, engine=engine)


def qwen_speed(base: Preset | None = None) -> list[Point]:
    """Qwen's batch-1 speed by input length, published against simulated (by default with
    the preset qwen-72b-bf16-tp4-a100)."""
    base = base or presets.load("qwen-72b-bf16-tp4-a100")
    points = []
    for prompt, published in QWEN_SPEED.items():
        preset = vllm_063_offline(base, 65536 if prompt > 32768 else 32768)
        [seq] = replay(preset, [Seq(prompt, QWEN_OUTPUT_TOKENS, 0.0)]).finished
        assert seq.finished_at is not None
        speed = QWEN_OUTPUT_TOKENS / seq.finished_at
        points.append(Point(f"{prompt:,} input tokens, batch 1", published, speed, "tokens/s"))
    return points


def lmdeploy_llama2_70b(
    base: Preset | None = None,
    rows: Collection[tuple[int, int, int]] = (),
    sequence_overhead: float = TURBOMIND_SEQUENCE_OVERHEAD,
) -> list[Load]:
    """lmdeploy's Llama-2-70B rows by concurrency (or only `rows`, keys of the table),
    published against simulated (by default with the preset llama-2-70b-fp16-tp4-a100, its
    CPU cost per sequence TurboMind's)."""
    base = base or presets.load("llama-2-70b-fp16-tp4-a100")
    efficiency = dataclasses.replace(base.perf.efficiency, sequence_overhead=sequence_overhead)
    preset = dataclasses.replace(
        base,
        perf=dataclasses.replace(base.perf, efficiency=efficiency),
        engine=dataclasses.replace(base.engine, enable_prefix_caching=False),
    )
    loads = []
    for (clients, prompt, output), (speed, ttft, tpot) in LMDEPLOY_LLAMA2_70B.items():
        if rows and (clients, prompt, output) not in rows:
            continue
        trace = closed_loop(preset, clients, LMDEPLOY_ROUNDS, prompt, output)
        first = [t for s in trace.finished if (t := trace.ttft(s)) is not None]
        gaps = sorted(trace.gaps)
        setup = f"{clients} clients, {prompt:,} in / {output:,} out"
        loads.append(
            Load(
                clients,
                Point(setup, ttft, sum(first) / len(first), "s TTFT mean"),
                Point(setup, tpot, gaps[len(gaps) // 2], "s TPOT p50"),
                Point(setup, speed, len(trace.finished) * output / trace.elapsed, "out tok/s"),
            )
        )
    return loads


def sharegpt_like(n: int, seed: int) -> list[tuple[int, int]]:
    """`n` (prompt, output) lengths: log-normal, filtered as vLLM's ShareGPT sampler does,
    scaled to VLLM_PCIE_MEAN_LENGTHS."""
    rng = random.Random(seed)
    means = VLLM_PCIE_MEAN_LENGTHS
    pairs: list[tuple[float, float]] = []
    while len(pairs) < n:
        prompt, output = (rng.lognormvariate(math.log(m) - 0.5, 1.0) for m in means)
        if 4 <= prompt <= 1024 and output >= 4 and prompt + output <= 2048:
            pairs.append((prompt, output))
    scale = [m / statistics.fmean(p[i] for p in pairs) for i, m in enumerate(means)]
    return [(max(4, round(p * scale[0])), max(4, round(o * scale[1]))) for p, o in pairs]


def poisson(preset: Preset, qps: float, seed: int) -> Trace:
    """vLLM's benchmark_serving at `qps`: the ShareGPT-like requests, Poisson arrivals."""
    rng = random.Random(seed)
    clock, seqs = 0.0, []
    for prompt, output in sharegpt_like(VLLM_PCIE_REQUESTS, seed):
        seqs.append(Seq(prompt, output, clock))
        clock += rng.expovariate(qps)
    return replay(preset, seqs)


def served(trace: Trace) -> dict[str, float]:
    """benchmark_serving's figures of one run, in its units (ms, req/s)."""
    done = trace.finished
    ttft = [1e3 * t for s in done if (t := trace.ttft(s)) is not None]
    tpot = [
        1e3 * (s.finished_at - s.first_token_at) / (s.output_tokens - 1)
        for s in done
        if s.output_tokens > 1 and s.finished_at is not None and s.first_token_at is not None
    ]
    return {
        "req/s": len(done) / trace.elapsed,
        "TTFT mean": statistics.fmean(ttft),
        "TTFT median": statistics.median(ttft),
        "TPOT mean": statistics.fmean(tpot),
        "TPOT median": statistics.median(tpot),
        "ITL median": 1e3 * statistics.median(trace.gaps),
    }


def vllm_pcie_llama33_70b(base: Preset | None = None) -> list[Rate]:
    """The gist's rows by QPS, published against simulated (by default with the preset
    llama-70b-bf16-tp4-a100-pcie), each figure the median over REPLAY_SEEDS runs."""
    base = base or presets.load("llama-70b-bf16-tp4-a100-pcie")
    rates = []
    for qps, published in VLLM_PCIE_LLAMA33_70B.items():
        runs = [served(poisson(base, qps, seed)) for seed in REPLAY_SEEDS]
        sim = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        setup = f"{qps:g} QPS, {VLLM_PCIE_REQUESTS} requests"
        point = {
            key: Point(setup, value, sim[key], "req/s" if key == "req/s" else f"ms {key}")
            for key, value in published.items()
        }
        rates.append(
            Rate(
                qps,
                point.pop("TTFT median"),
                point.pop("TPOT median"),
                tuple(point.values()),
            )
        )
    return rates


# A serial API-server front end (frontend.py) tried against the published TTFTs: seconds per
# request and per input token. docs/sim/calibration.md has what it did.
FRONTEND_REQUEST = (0.0, 2e-3, 5e-3, 10e-3, 20e-3, 40e-3)
FRONTEND_TOKEN = (0.0, 1e-6, 4e-6, 16e-6, 64e-6)


def with_frontend(preset: Preset, request_s: float, token_s: float) -> Preset:
    efficiency = dataclasses.replace(
        preset.perf.efficiency, frontend_request=request_s, frontend_token=token_s
    )
    return dataclasses.replace(preset, perf=dataclasses.replace(preset.perf, efficiency=efficiency))


def frontend_ttft(request_s: float, token_s: float) -> dict[str, list[Point]]:
    """Each source's published TTFTs against the simulator's with this front end on its
    preset: lmdeploy's means by clients and prompt length, the vLLM gist's medians and
    means by rate."""
    lmdeploy = with_frontend(presets.load("llama-2-70b-fp16-tp4-a100"), request_s, token_s)
    pcie = with_frontend(presets.load("llama-70b-bf16-tp4-a100-pcie"), request_s, token_s)
    rates = vllm_pcie_llama33_70b(pcie)
    return {
        "lmdeploy": [load.ttft for load in lmdeploy_llama2_70b(lmdeploy)],
        "vllm": [
            point
            for rate in rates
            for point in (rate.ttft, *rate.others)
            if point.unit == "ms TTFT mean" or point is rate.ttft
        ],
    }
