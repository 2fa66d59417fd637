"""Write the proxy's request log for a benchmark tool's file, so that `python -m loadgen
--replay`, which reads the proxy's log, sends the load the tool sent: any file `python -m
loadgen.sim fit` reads (vLLM's bench serve JSON, GuideLLM's benchmarks.json, AIPerf's
profile_export.jsonl, inference-perf's per-request report), each request's arrival,
lengths, TTFT and TPOT as the tool measured them.

The requests are the fit's (loadgen/sim/twin/capture.py): a file's loads laid one after
another from 0, failed requests left out. A vLLM bench serve file that kept no send times
(releases before 0.32) has its arrivals rebuilt from its rate, burstiness and seed
(sources/rebuilt.py): a schedule like the run's, not the very one, so replaying it
reproduces the run's percentiles, not its requests.

With --prompts-cached each request is written as vLLM serves a prompt it has seen before
with prefix caching on: its whole blocks (16 tokens, vLLM's default block size) found in
the cache, only the rest prefilled, which the line then counts as its prompt (vLLM
computes at least the prompt's last token). That is a run sent after another run of the
same prompts on the same server, whose cache held them all: the replay, on a fresh
server, has no other way to start with them cached. It leaves each context shorter by the
cached tokens for the steps that read it.

    python examples/traces/fit_source_proxy_log.py rate-4.json > rate-4.log
    python examples/traces/fit_source_proxy_log.py rate-4.json --prompts-cached > cached-4.log
"""

from __future__ import annotations

import argparse
import sys

from loadgen.sim import twin
from loadgen.sim.twin import capture

EPOCH = 1_700_157_600.0  # the first arrival on the log's clock (any will do)
BLOCK = 16  # vLLM's default block size: what its prefix cache keeps and finds


def uncached(prompt_tokens: int) -> int:
    """What vLLM prefills of a prompt whose whole blocks are all in its cache."""
    return prompt_tokens - (prompt_tokens - 1) // BLOCK * BLOCK


def lines(source: str, prompts_cached: bool = False) -> list[bytes]:
    """One proxy log line per completed request of `source`; ValueError naming the file."""
    found = capture.read([source])
    model = found.model or "unknown"
    out = []
    for r in found.requests:
        prompt = uncached(r.prompt_tokens) if prompts_cached else r.prompt_tokens
        request = twin.Request(r.arrival, prompt, r.output_tokens)
        first = r.arrival + (r.ttft or 0.0)
        last = first + (r.tpot or 0.0) * max(0, r.output_tokens - 1)
        timing = twin.Timing(
            replica=0,
            arrival=r.arrival,
            engine_arrival=r.arrival,
            queued=r.arrival,
            scheduled=r.arrival,
            first_token=first,
            finished=last,
            first_sent=first,
            last_sent=last,
            prompt_tokens=prompt,
            output_tokens=r.output_tokens,
            cached_tokens=r.cached_tokens,
            preemptions=0,
            batch=0.0,
        )
        out.append(capture.log_line(request, timing, model=model, epoch=EPOCH))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a file python -m loadgen.sim fit reads")
    parser.add_argument(
        "--prompts-cached",
        action="store_true",
        help="write each prompt as what vLLM prefills of it when all its whole blocks are in "
        "the prefix cache (the same prompts sent before on the same server)",
    )
    args = parser.parse_args(argv)
    try:
        found = lines(args.source, args.prompts_cached)
    except ValueError as exc:  # CaptureError among them: one line naming the file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in found:
        sys.stdout.buffer.write(line + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
