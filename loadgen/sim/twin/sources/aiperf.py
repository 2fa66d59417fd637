"""AIPerf's profile_export.jsonl: a record per request, each metric as {"value", "unit"}.
Sent on the wall clock (`metadata.request_start_ns`, epoch nanoseconds). Pure.

The prompt length is the server's count (`usage_prompt_tokens`) where the server gave one,
else AIPerf's own tokenizer's (`input_sequence_length`); a warm-up record loaded the server
but is not fitted to.
"""

from __future__ import annotations

from typing import Any

from loadgen.inputs.jsonl import strict_objects
from loadgen.sim.twin.sources.fields import MAX_EPOCH, number, table, tokens, tpot
from loadgen.sim.twin.sources.stream import Captured, CaptureError, Stream

UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "us": 1e-6, "ns": 1e-9}


def looks_like(item: dict[str, Any]) -> bool:
    return isinstance(item.get("metadata"), dict) and "request_start_ns" in item["metadata"]


def read(name: str, text: str) -> list[Stream]:
    stream = Stream()
    for line, item in strict_objects(text, name, CaptureError):
        at = f"{name}:{line}"
        meta, metrics = table(item, "metadata", at), table(item, "metrics", at)
        if item.get("error") or meta.get("was_cancelled"):
            stream.failed += 1
            continue
        values = {k: v.get("value") for k, v in metrics.items() if isinstance(v, dict)}
        output = tokens(
            values, _first(values, "usage_completion_tokens", "output_sequence_length"), at
        )
        if output == 0:
            stream.failed += 1
            continue
        ttft = _duration(metrics, "time_to_first_token", at)
        e2e = _duration(metrics, "request_latency", at)
        stream.rows.append(
            (
                Captured(
                    arrival=number(meta, "request_start_ns", at, MAX_EPOCH * 1e9) * 1e-9,
                    prompt_tokens=tokens(
                        values, _first(values, "usage_prompt_tokens", "input_sequence_length"), at
                    ),
                    output_tokens=output,
                    ttft=ttft,
                    tpot=tpot(e2e, ttft, output),
                    measured=meta.get("benchmark_phase", "profiling") == "profiling",
                ),
                None,
            )
        )
    return [stream] if stream.rows or stream.failed else []


def _first(values: dict[str, Any], *keys: str) -> str:
    """The first key the record has a value for (the last named when it has none)."""
    return next((k for k in keys if values.get(k) is not None), keys[-1])


def _duration(metrics: dict[str, Any], key: str, at: str) -> float:
    metric = table(metrics, key, f"{at}: metrics")
    scale = UNITS.get(str(metric.get("unit")))
    if scale is None:
        raise CaptureError(f"{at}: metrics.{key} has no unit of time ({metric.get('unit')!r})")
    return number(metric, "value", f"{at}: metrics.{key}", 24 * 3600 / scale) * scale
