"""The proxy's request log lines and loadgen's requests.jsonl: one stream each, on the wall
clock (both write epoch seconds). Pure.

What a fit needs of a request is when it arrived, its lengths, the prefix-cache hit, and
what was measured: TTFT and TPOT and, with vLLM's --enable-per-request-metrics, the server's
queue, prefill (scheduled to first token) and decode times. Requests outside a run's
measured window (warmup, cooldown) still loaded the server: replayed, not fitted to.
"""

from __future__ import annotations

from typing import Any

from loadgen.inputs.jsonl import strict_objects
from loadgen.sim.twin.sources.fields import MAX_EPOCH, number, seconds, tokens
from loadgen.sim.twin.sources.stream import Captured, CaptureError, Stream

ACCESS_LOGGER = "latency_proxy.access"  # the proxy's request lines (docs/reference/log-line.md)


def read(name: str, text: str) -> list[Stream]:
    """The file's request lines as one stream (none when it has none)."""
    stream = Stream()
    first_target: object = None
    for number_, item in strict_objects(text, name, CaptureError):
        if "intended_at" in item:  # loadgen's requests.jsonl: its first target only
            first_target = first_target or item.get("target")
            if item.get("target") != first_target:
                continue
            arrival_key, ok, model = "sent_at", bool(item.get("ok")), None
            measured = not item.get("excluded")
        elif item.get("logger") == ACCESS_LOGGER and item.get("msg") == "request":
            if not item.get("operation"):
                continue  # not a generation (a model list, a health check)
            arrival_key, ok, measured = "arrived_at", item.get("outcome") == "ok", True
            model = item.get("model") if isinstance(item.get("model"), str) else None
        else:
            continue
        if not ok:
            stream.failed += 1
            continue
        if not item.get("output_tokens") or not item.get("input_tokens"):
            stream.empty += 1
            continue
        stream.rows.append((_request(item, f"{name}:{number_}", arrival_key, measured), model))
    return [stream] if stream.rows or stream.failed or stream.empty else []


def _request(item: dict[str, Any], at: str, arrival_key: str, measured: bool) -> Captured:
    return Captured(
        arrival=number(item, arrival_key, at, MAX_EPOCH),
        prompt_tokens=tokens(item, "input_tokens", at),
        output_tokens=tokens(item, "output_tokens", at),
        cached_tokens=tokens(item, "cached_tokens", at, 0),
        ttft=seconds(item, "ttft_s", at),
        # a TPOT of 0: every token in one delivery (a starved client or proxy), which says
        # nothing of decoding
        tpot=seconds(item, "tpot_s", at) or None,
        server_queue=seconds(item, "server_queue_s", at),
        server_prefill=seconds(item, "server_ttft_s", at),
        server_decode=seconds(item, "server_decode_s", at),
        measured=measured,
    )
