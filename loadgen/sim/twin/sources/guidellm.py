"""GuideLLM's benchmarks.json: benchmarks run one after another (a rate each), each with its
requests. A benchmark is a stream of its own: its requests' start times are epoch seconds,
and the benchmarks follow each other, so none overlaps another. Pure.

Errored and incomplete requests are counted as failed. TTFT and the time per token after
the first (`inter_token_latency_ms`, the proxy's TPOT) are GuideLLM's, in milliseconds; the
lengths are the server's counts where GuideLLM preferred them (its default).
"""

from __future__ import annotations

from typing import Any

from loadgen.sim.twin.sources.fields import MAX_EPOCH, number, seconds, table, tokens
from loadgen.sim.twin.sources.stream import Captured, CaptureError, Stream


def looks_like(document: Any) -> bool:
    return isinstance(document, dict) and isinstance(document.get("benchmarks"), list)


def read(name: str, document: dict[str, Any]) -> list[Stream]:
    streams = []
    for b, benchmark in enumerate(document["benchmarks"], 1):
        at = f"{name}: benchmark {b}"
        requests = table(benchmark, "requests", at)
        successful = requests.get("successful")
        if not isinstance(successful, list):
            raise CaptureError(f"{at}: no requests.successful list (written with sample_size=0?)")
        strategy = table(table(benchmark, "config", at), "strategy", f"{at}: config")
        stream = Stream(
            failed=sum(len(requests.get(k) or []) for k in ("errored", "incomplete")),
            settings={k: strategy[k] for k in ("type_", "rate", "random_seed") if k in strategy},
        )
        for i, item in enumerate(successful, 1):
            stream.rows.append((_request(item, f"{at}, request {i}"), None))
        if stream.rows or stream.failed:
            streams.append(stream)
    return streams


def _request(item: dict[str, Any], at: str) -> Captured:
    output = tokens(item, "output_tokens", at)
    return Captured(
        arrival=number(item, "request_start_time", at, MAX_EPOCH),
        prompt_tokens=tokens(item, "prompt_tokens", at),
        output_tokens=output,
        cached_tokens=tokens(item, "cached_tokens", at, 0),
        ttft=seconds(item, "time_to_first_token_ms", at, 1e-3),
        # 0: every token in one delivery, which says nothing of decoding
        tpot=(seconds(item, "inter_token_latency_ms", at, 1e-3) or None) if output > 1 else None,
    )
