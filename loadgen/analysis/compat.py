"""The same requests under other tools' definitions (summary.json's `compat`): vLLM bench
serve's and AIPerf's, from the actual send, so a figure can be put beside theirs. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.analysis import stats
from loadgen.analysis.records import Record


def compat(ok: Sequence[Record]) -> dict[str, Any]:
    """The same requests under vLLM bench serve's and AIPerf's definitions (from actual send)."""
    ttft = [r.ttft_s - r.send_lag_s for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s - r.send_lag_s for r in ok if r.e2e_s is not None]
    decode = [
        (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)
        for r in ok
        if r.ttft_s is not None
        and r.e2e_s is not None
        and r.output_tokens is not None
        and r.output_tokens >= 2
    ]
    itl = [gap for r in ok for gap in r.itl_s]
    # both tools define these three alike: described once, shown under each tool's names
    first, per_token, whole = (stats.describe(v, ci=False) for v in (ttft, decode, e2e))
    return {
        "vllm_bench": {
            "definition": "from actual send; tpot = (e2e - ttft) / (output_tokens - 1); "
            "itl = gaps between chunks",
            "ttft_s": first,
            "tpot_s": per_token,
            "itl_s": stats.describe(itl, ci=False),
            "e2el_s": whole,
        },
        "aiperf": {
            "definition": "from actual send; inter_token_latency = "
            "(request_latency - ttft) / (output_tokens - 1)",
            "time_to_first_token_s": first,
            "inter_token_latency_s": per_token,
            "request_latency_s": whole,
        },
    }
