"""inference-perf's reports. Its per-request report (per_request_lifecycle_metrics.json,
`report.request_lifecycle.per_request: true`) is a list of requests timed on the client's
monotonic clock: one stream of its own, its stages one after another on that clock. Pure.

TTFT is the first output token's time less the start; the time per token after the first
spans the first to the last output token. The prompt length is the server's count where it
gave one. A stage or summary report holds percentiles only, no request: it is refused with
the way to the per-request report.
"""

from __future__ import annotations

from typing import Any

from loadgen.sim.twin.sources.fields import MAX_EPOCH, number, table, tokens
from loadgen.sim.twin.sources.stream import Captured, CaptureError, Stream

PER_REQUEST = (
    "set report.request_lifecycle.per_request: true and fit its per_request_lifecycle_metrics.json"
)


def looks_like_requests(document: Any) -> bool:
    return (
        isinstance(document, list)
        and bool(document)
        and isinstance(document[0], dict)
        and {"start_time", "end_time", "info"} <= document[0].keys()
    )


def looks_like_stage(document: Any) -> bool:
    return isinstance(document, dict) and {"load_summary", "successes"} <= document.keys()


def refuse_stage(name: str) -> list[Stream]:
    raise CaptureError(
        f"{name}: an inference-perf stage report holds percentiles only, no request: {PER_REQUEST}"
    )


def read(name: str, document: list[Any]) -> list[Stream]:
    stream = Stream(wall_clock=False)
    for i, item in enumerate(document, 1):
        at = f"{name}: request {i}"
        if not isinstance(item, dict):
            raise CaptureError(f"{at}: not a JSON object")
        if item.get("error") is not None:
            stream.failed += 1
            continue
        captured = _request(item, at)
        if captured is None:
            stream.failed += 1
        else:
            stream.rows.append((captured, None))
    return [stream]


def _request(item: dict[str, Any], at: str) -> Captured | None:
    info = table(item, "info", at)
    response = table(info, "response_metrics", f"{at}: info")
    given = response.get("server_usage")
    usage: dict[str, Any] = given if isinstance(given, dict) else {}
    start = number(item, "start_time", at, MAX_EPOCH)
    times = response.get("output_token_times")
    if not isinstance(times, list):
        raise CaptureError(f"{at}: no info.response_metrics.output_token_times list")
    if not times:
        return None  # nothing came back
    stamps = [number({"t": t}, "t", f"{at}: output_token_times", MAX_EPOCH) for t in times]
    output = tokens(response, "output_tokens", f"{at}: info.response_metrics", len(stamps))
    prompt = usage.get("prompt_tokens")
    return Captured(
        arrival=start,
        prompt_tokens=tokens(usage, "prompt_tokens", at)
        if prompt
        else tokens(info, "input_tokens", at),
        output_tokens=output,
        ttft=max(0.0, stamps[0] - start),
        tpot=(stamps[-1] - stamps[0]) / (len(stamps) - 1)
        if len(stamps) > 1 and stamps[-1] > stamps[0]
        else None,
    )
