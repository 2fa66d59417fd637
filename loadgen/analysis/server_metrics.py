"""Where the time went, from the servers' own Prometheus metrics around a measured window.

loadgen scrapes each `--server-metrics` endpoint (vLLM's /metrics, the proxy's admin
/metrics) when a block's measured window opens and when it closes. The difference of two
cumulative histograms is the histogram of the requests that finished in between: its mean
is exact (`_sum / _count`), its quantiles are estimates from the buckets (linear inside the
bucket, as Prometheus' `histogram_quantile`), reported with the bucket bounds they fall
between. Parsing and arithmetic are pure; `scrape` is the I/O edge and never fails a run.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# summary key -> (metric family, label filter): vLLM's request phases, then the proxy's own
FIGURES: dict[str, tuple[str, Mapping[str, str]]] = {
    "queue_s": ("vllm:request_queue_time_seconds", {}),
    "prefill_s": ("vllm:request_prefill_time_seconds", {}),
    "decode_s": ("vllm:request_decode_time_seconds", {}),
    "inference_s": ("vllm:request_inference_time_seconds", {}),
    "ttft_s": ("vllm:time_to_first_token_seconds", {}),
    "e2e_s": ("vllm:e2e_request_latency_seconds", {}),
    "proxy_ttft_s": ("gen_ai_server_time_to_first_token_seconds", {}),
    "proxy_overhead_s": ("latency_proxy_overhead_seconds", {"phase": "request"}),
}
GAUGES = {"waiting": "vllm:num_requests_waiting", "running": "vllm:num_requests_running"}
PREEMPTIONS = "vllm:num_preemptions"  # a counter: the family name has no _total
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: (upper bound, cumulative count) pairs, +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def __sub__(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> tuple[float, float, float] | None:
        """(estimate, lower bound, upper bound) of the q-quantile; None when empty."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):  # beyond the last finite bound: say only that
                    return lower, lower, le
                share = (rank - below) / (cumulative - below) if cumulative > below else 1.0
                return lower + (le - lower) * share, lower, le
            lower, below = le, cumulative
        return None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape of one endpoint: histograms and scalar series, summed over other labels."""

    source: str
    at: float
    histograms: Mapping[str, Histogram]
    scalars: Mapping[str, float]


def _matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def parse(text: str, source: str, at: float) -> Snapshot:
    """The families FIGURES, GAUGES and PREEMPTIONS name, from a text exposition."""
    wanted = {name: labels for name, labels in FIGURES.values()}
    scalars_wanted = {*GAUGES.values(), PREEMPTIONS}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    scalars: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name
        if name in wanted:
            for sample in family.samples:
                if not _matches(sample.labels, wanted[name]):
                    continue
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    per = buckets.setdefault(name, {})
                    per[le] = per.get(le, 0.0) + sample.value
                elif sample.name.endswith("_sum"):
                    sums[name] = sums.get(name, 0.0) + sample.value
                elif sample.name.endswith("_count"):
                    counts[name] = counts.get(name, 0.0) + sample.value
        elif name in scalars_wanted:
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                scalars[name] = scalars.get(name, 0.0) + sample.value
    histograms = {
        name: Histogram(tuple(sorted(per.items())), sums.get(name, 0.0), counts.get(name, 0.0))
        for name, per in buckets.items()
    }
    return Snapshot(source, at, histograms, scalars)


def figure(histogram: Histogram, source: str) -> dict[str, object] | None:
    """mean (exact), bucket-estimated p50/p90/p99 with their bounds, count; None when empty."""
    if histogram.count <= 0:
        return None
    out: dict[str, object] = {"mean": histogram.sum / histogram.count}
    bounds: dict[str, list[float | None]] = {}
    for key, q in QUANTILES.items():
        found = histogram.quantile(q)
        out[key] = None if found is None else found[0]
        if found is not None:
            bounds[key] = [found[1], None if math.isinf(found[2]) else found[2]]
    out["count"] = round(histogram.count)
    out["source"] = source
    out["estimate"] = "buckets"
    out["bounds"] = bounds
    return out


@dataclass(slots=True, kw_only=True)
class ServerWindow:
    """One block's measured window as one endpoint saw it: what changed between two scrapes.

    Stored in run.json, so a summary is recomputed from it like from the records.
    """

    target: str
    block: int
    level: float | None
    source: str
    opened_at: float  # epoch seconds of the two scrapes
    closed_at: float
    histograms: dict[str, Histogram]  # family -> the requests that finished in the window
    gauges: dict[str, tuple[float | None, float]]  # GAUGES key -> (at opening, at closing)
    preemptions: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "block": self.block,
            "level": self.level,
            "source": self.source,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "histograms": {
                name: {
                    "buckets": [["+Inf" if math.isinf(le) else le, n] for le, n in h.buckets],
                    "sum": h.sum,
                    "count": h.count,
                }
                for name, h in self.histograms.items()
            },
            "gauges": {key: list(pair) for key, pair in self.gauges.items()},
            "preemptions": self.preemptions,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerWindow:
        histograms = {
            name: Histogram(tuple((float(le), n) for le, n in h["buckets"]), h["sum"], h["count"])
            for name, h in data["histograms"].items()
        }
        gauges = {key: (start, end) for key, (start, end) in data["gauges"].items()}
        return cls(**{**data, "histograms": histograms, "gauges": gauges})


def difference(
    before: Snapshot, after: Snapshot, *, target: str, block: int, level: float | None
) -> ServerWindow:
    """What one endpoint's series did between two of its scrapes."""
    empty = Histogram((), 0.0, 0.0)
    histograms = {
        name: h - before.histograms.get(name, empty) for name, h in after.histograms.items()
    }
    gauges = {
        key: (before.scalars.get(name), after.scalars[name])
        for key, name in GAUGES.items()
        if name in after.scalars
    }
    preemptions = (
        after.scalars[PREEMPTIONS] - before.scalars.get(PREEMPTIONS, 0.0)
        if PREEMPTIONS in after.scalars
        else None
    )
    return ServerWindow(
        target=target,
        block=block,
        level=level,
        source=after.source,
        opened_at=before.at,
        closed_at=after.at,
        histograms=histograms,
        gauges=gauges,
        preemptions=preemptions,
    )


def _added(histograms: Sequence[Histogram]) -> Histogram:
    counts: dict[float, float] = {}
    for h in histograms:
        for le, n in h.buckets:
            counts[le] = counts.get(le, 0.0) + n
    total, count = sum(h.sum for h in histograms), sum(h.count for h in histograms)
    return Histogram(tuple(sorted(counts.items())), total, count)


def server_block(windows: Sequence[ServerWindow]) -> dict[str, Any] | None:
    """summary.json's `targets.<name>.server`, from one target's windows at one level.

    A figure comes from the one endpoint whose histogram moved during the target's windows
    (their deltas added up); when two endpoints moved for the same figure (two servers busy
    at once, or one endpoint counting another's traffic) it is left null and said so in
    `notes`, never silently mixed. None when no endpoint was sampled.
    """
    if not windows:
        return None
    block: dict[str, Any] = dict.fromkeys(FIGURES)
    notes: list[str] = []
    for key, (name, _) in FIGURES.items():
        by_source: dict[str, list[Histogram]] = {}
        for w in windows:
            h = w.histograms.get(name)
            if h is not None and h.count > 0:
                by_source.setdefault(w.source, []).append(h)
        if len(by_source) == 1:
            ((source, found),) = by_source.items()
            block[key] = figure(_added(found), source)
        elif by_source:
            sources = ", ".join(sorted(by_source))
            notes.append(f"{key}: several endpoints moved in these windows ({sources}); not mixed")
    gauges: dict[str, Any] = {}
    for key in GAUGES:
        pairs = [w.gauges[key] for w in windows if key in w.gauges]
        if pairs:
            gauges[key] = {  # the highest over the target's windows
                "start": max((s for s, _ in pairs if s is not None), default=None),
                "end": max(e for _, e in pairs),
            }
    preempted = [w.preemptions for w in windows if w.preemptions is not None]
    gauges["preemptions"] = sum(preempted) if preempted else None
    block["gauges"] = gauges
    block["sources"] = sorted({w.source for w in windows})
    block["notes"] = notes
    return block


async def scrape(urls: Iterable[str], clock_epoch: float) -> list[Snapshot]:
    """One snapshot per URL that answered; an endpoint that did not is left out."""

    async def one(http: aiohttp.ClientSession, url: str) -> Snapshot | None:
        try:
            async with http.get(url) as response:
                if response.status != 200:
                    return None
                return parse(await response.text(), url, clock_epoch)
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        found = await asyncio.gather(*(one(http, url) for url in urls))
    return [s for s in found if s is not None]
