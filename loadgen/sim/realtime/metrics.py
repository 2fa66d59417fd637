"""/metrics: the vLLM series dashboards read, and simulated DCGM-exporter GPU gauges.

Names, buckets and labels (model_name, engine) follow vLLM's V1 PrometheusStatLogger
(vllm/v1/metrics/loggers.py); the GPU gauges use dcgm-exporter's names and labels, one series
per simulated GPU. Each app has its own registry, so several can live in one process.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from loadgen.sim.model.gpus import GpuMeter
from loadgen.sim.model.roofline import PerfModel
from loadgen.sim.model.sequence import Seq

# vLLM's lists, as loggers.py writes them
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0
)  # fmt: skip
REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0
)  # fmt: skip
LAG_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5)
MIB = 2**20


def token_buckets(max_model_len: int) -> list[int]:
    """vLLM's 1-2-5 buckets up to max_model_len."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(m * scale)
        scale *= 10


class EngineState(Protocol):
    """What a backend exposes to the scrape."""

    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def kv_usage(self) -> float: ...
    @property
    def preemptions(self) -> int: ...
    @property
    def prefix_cache_queries(self) -> int: ...
    @property
    def prefix_cache_hits(self) -> int: ...


class SimMetrics:
    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.registry = CollectorRegistry()
        labels = ("model_name", "engine")
        self._values = (model_name, "0")
        r = self.registry

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[int]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(*self._values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(*self._values)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_BUCKETS,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_BUCKETS,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_BUCKETS,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_BUCKETS,
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_BUCKETS,
        )
        lengths = token_buckets(max_model_len)
        self.prompt_len = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", lengths
        )
        self.generation_len = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", lengths
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*labels, "finished_reason"),
            registry=r,
        )
        # not a vLLM series: the simulator's own timing error, so a benchmark can show that
        # the upstream kept its schedule (bench/sim_capacity.py)
        self.schedule_lag = histogram(
            "loadgen_sim_schedule_lag_seconds",
            "How late the simulator released tokens against its model's schedule.",
            LAG_BUCKETS,
        )

    def watch(
        self,
        state: EngineState,
        gpus: tuple[PerfModel, GpuMeter] | None = None,
        gpu_memory_utilization: float = 0.9,
    ) -> None:
        """Export the engine's gauges (and, given its performance model and GPU account,
        its GPUs)."""
        self.registry.register(_StateCollector(self._values, state, gpus, gpu_memory_utilization))

    def on_token(self, seq: Seq, tokens: int, gap: float | None) -> None:
        """`tokens` new tokens for `seq`, `gap` seconds apart (None: the first one)."""
        self.generation_tokens.inc(tokens)
        if gap is None:
            assert seq.first_token_at is not None
            self.ttft.observe(seq.first_token_at - seq.arrival)
            self.prompt_tokens.inc(seq.prompt_tokens)
            tokens -= 1
            gap = 0.0  # the rest of a scripted first chunk (script.py's per_chunk) came with it
        for _ in range(tokens):
            self.itl.observe(gap)

    def on_finish(self, seq: Seq, finish_reason: str) -> None:
        assert seq.finished_at is not None and seq.first_token_at is not None
        scheduled, queued = seq.scheduled_at, seq.queued_at
        assert scheduled is not None and queued is not None  # stamped by whatever ran it
        self.e2e.observe(seq.finished_at - seq.arrival)
        self.queue.observe(scheduled - queued)
        self.prefill.observe(seq.first_token_at - scheduled)
        self.decode.observe(seq.finished_at - seq.first_token_at)
        self.inference.observe(seq.finished_at - scheduled)
        if seq.generated > 1:
            self.tpot.observe((seq.finished_at - seq.first_token_at) / (seq.generated - 1))
        self.prompt_len.observe(seq.prompt_tokens)
        self.generation_len.observe(seq.generated)
        self._success.labels(*self._values, finish_reason).inc()

    def render(self, accept: str | None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _StateCollector:
    """Gauges read from the engine at scrape time, and the simulated GPUs."""

    def __init__(
        self,
        values: tuple[str, str],
        state: EngineState,
        gpus: tuple[PerfModel, GpuMeter] | None,
        gpu_memory_utilization: float,
    ) -> None:
        self._values = values
        self._state = state
        self._gpus = gpus
        self._memory_utilization = gpu_memory_utilization
        self._host = socket.gethostname()
        count = gpus[0].hardware.tensor_parallel if gpus else 0
        self._uuids = [f"GPU-{uuid.uuid4()}" for _ in range(count)]

    def collect(self) -> Iterator[Metric]:
        s, labels = self._state, ["model_name", "engine"]
        for name, doc, value in (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.num_running,
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                s.num_waiting,
            ),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage),
        ):
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(self._values, value)
            yield g
        for name, doc, value in (
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                s.preemptions,
            ),
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_cache_queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_cache_hits,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(self._values, value)
            yield c
        if self._gpus is not None:
            yield from self._gpu_series(*self._gpus)

    def _gpu_series(self, perf: PerfModel, meter: GpuMeter) -> Iterator[Metric]:
        """dcgm-exporter's fields. All GPUs of a TP group work in lockstep; power and energy
        come from the step-by-step account (gpus.py); vLLM preallocates its KV cache, so
        framebuffer use is flat at the memory budget."""
        hw = perf.hardware
        total_mib = hw.gpu_memory / MIB
        used_mib = total_mib * self._memory_utilization
        labels = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
        families = {
            "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", round(meter.utilization * 100)),
            "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", round(used_mib)),
            "DCGM_FI_DEV_FB_FREE": (
                "Framebuffer memory free (in MiB).",
                round(total_mib - used_mib),
            ),
            "DCGM_FI_DEV_POWER_USAGE": ("Power draw (in W).", meter.power),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
                "Total energy consumption since boot (in mJ).",
                round(meter.energy_joules * 1000),
            ),
        }
        for name, (doc, value) in families.items():
            # a gauge family keeps dcgm-exporter's exact name (a counter's would gain _total)
            g = GaugeMetricFamily(name, doc, labels=labels)
            for i, gpu_uuid in enumerate(self._uuids):
                g.add_metric(
                    [
                        str(i),
                        gpu_uuid,
                        f"00000000:{0x10 + i:02X}:00.0",
                        f"nvidia{i}",
                        hw.gpu,
                        self._host,
                    ],
                    value,
                )
            yield g
