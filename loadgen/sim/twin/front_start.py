"""Where the front end's search starts (verdict.py): from the gap between the client's TTFT
and the server's in the capture, or without the server's, from the client's TTFT. Pure, no
I/O.

From FRONTEND_START's scale a search whose first steps gain little stops before it reaches
a gap of tens of milliseconds, so a capture with the server's timings starts it at the
median gap instead, and one without starts the delay outside the engine at a tenth of the
median TTFT: within a few of the search's steps of nothing and of all of it.
"""

from __future__ import annotations

from loadgen.sim.twin.capture import Captured
from loadgen.sim.twin.figures import percentile, server_figures

FRONTEND_START = {
    "frontend_request": 1e-3,
    "frontend_token": 1e-6,
    "frontend_output_token": 1e-6,
    "frontend_latency": 1e-3,
}


def gap_start(requests: list[Captured]) -> dict[str, float]:
    """The median gap, half of it a cost per request and half one per prompt token, and for
    the output work a third of it that of the streams running when a request arrives
    (Little's law: the arrival rate times the mean time a request is in flight)."""
    gaps, prompts = [], []
    for r in requests:
        server = server_figures(r)["ttft"]
        if r.ttft is not None and server is not None:
            gaps.append(r.ttft - server)
            prompts.append(r.prompt_tokens)
    if not gaps:
        return dict(FRONTEND_START)
    gap = max(percentile(gaps, 50), FRONTEND_START["frontend_request"])
    mean_prompt = max(1.0, sum(prompts) / len(prompts))
    span = max(requests[-1].arrival - requests[0].arrival, 1.0)
    running = max(1.0, sum(_in_flight(r) for r in requests) / span)
    return {
        "frontend_request": gap / 2,
        "frontend_token": gap / 2 / mean_prompt,
        "frontend_output_token": gap / 3 / running,
    }


def delay_start(requests: list[Captured]) -> dict[str, float]:
    """The delay outside the engine at a tenth of the median TTFT (the search clamps it
    into the term's range)."""
    ttfts = [r.ttft for r in requests if r.ttft is not None]
    tenth = percentile(ttfts, 50) / 10 if ttfts else FRONTEND_START["frontend_latency"]
    return {"frontend_latency": tenth}


def _in_flight(r: Captured) -> float:
    """How long a captured request was in flight, as far as its figures say."""
    decode = r.server_decode
    if decode is None and r.tpot is not None:
        decode = r.tpot * max(0, r.output_tokens - 1)
    return (r.ttft or 0.0) + (decode or 0.0)
