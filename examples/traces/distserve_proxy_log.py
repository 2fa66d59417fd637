"""Write the proxy's request log for DistServe's published vLLM measurements: real vLLM
serving OPT-13B on one A100-80GB, every request's arrival, lengths, TTFT and TPOT as its
client measured them, at one Poisson rate per file.

The files are the `vllm-N-RATE.exp` results of DistServe's artifact
(github.com/LLMServe/DistServe, Apache-2.0, commit 20a1633 "Add alignment data",
simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/): one line holding
a Python list of per-request dicts (prompt_len, output_len, issue_time, first_token_time,
complete_time, ttft_ms, tpot_ms, latency_ms), then a summary. Each request becomes the
`request` line latency_proxy logs (docs/reference/log-line.md), its arrival the client's
issue time; the server's own split was not recorded, so the lines have none.

    git -C DistServe show 20a1633:simdistserve/benchmarks/alignment/data-ground-truth/\\
        opt-13b-sharegpt/vllm-400-4.exp > vllm-400-4.exp
    python examples/traces/distserve_proxy_log.py vllm-400-4.exp > rate-4.log
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from loadgen.sim import twin
from loadgen.sim.twin import capture

EPOCH = 1_700_157_600.0  # the run's first issue on the log's clock (any will do)
MODEL = "opt-13b"


def rows(path: Path) -> list[dict]:
    """The per-request dicts of one .exp file, in issue order. ValueError naming the file."""
    first = path.read_text().split("\n", 1)[0]
    try:
        found = ast.literal_eval(first)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{path}: its first line is not a list of requests ({exc})") from None
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise ValueError(f"{path}: its first line is not a list of requests")
    return sorted(found, key=lambda r: r["issue_time"])


def lines(found: list[dict]) -> list[bytes]:
    """One proxy log line per request, arrivals from EPOCH."""
    start = found[0]["issue_time"]
    out = []
    for r in found:
        at = r["issue_time"] - start
        request = twin.Request(at, int(r["prompt_len"]), int(r["output_len"]))
        timing = twin.Timing(
            replica=0,
            arrival=at,
            engine_arrival=at,
            queued=at,
            scheduled=at,
            first_token=r["first_token_time"] - start,
            finished=r["complete_time"] - start,
            first_sent=r["first_token_time"] - start,
            last_sent=r["complete_time"] - start,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
            cached_tokens=0,
            preemptions=0,
            batch=0.0,
        )
        line = capture.log_line(
            request, timing, model=MODEL, epoch=EPOCH, operation="text_completion"
        )
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exp", type=Path, help="a DistServe vllm-N-RATE.exp result file")
    args = parser.parse_args(argv)
    try:
        found = rows(args.exp)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in lines(found):
        sys.stdout.buffer.write(line + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
