"""Write the proxy's request log for a trace served by the simulator's twin: a stand-in for a
deployment's logs, to try `python -m loadgen.sim fit` and a predicted capacity search on.

The trace (an Azure-format CSV, e.g. from azure_like.py) is run on the virtual clock through
a bundled preset whose efficiency terms are changed to "hidden" values the fit is not told
(--mbu, --mfu, --host-overhead-us, --sequence-overhead-us), and each request becomes the
`request` line latency_proxy logs for it (docs/reference/log-line.md): arrival, tokens,
TTFT, TPOT. No prompt text: the proxy never logs it.

    python examples/traces/azure_like.py --minutes 60 --rate 0.5 > hour.csv
    python examples/traces/twin_proxy_log.py hour.csv --mbu 0.5 --mfu 0.47 > proxy.log
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import datetime
from pathlib import Path

from loadgen.sim import twin
from loadgen.sim.model import presets
from loadgen.sim.twin import capture, fit

EPOCH = 1_700_157_600.0  # the trace's first second on the log's clock (any will do)


def requests(path: Path, limit: int) -> list[twin.Request]:
    """The CSV's rows as the twin's requests, prompts cut to fit the model's context."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp() for r in rows]
    out = []
    for stamp, row in zip(stamps, rows, strict=True):
        output = int(row["GeneratedTokens"])
        prompt = min(int(row["ContextTokens"]), limit - output)
        out.append(twin.Request(stamp - stamps[0], prompt, output))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="an Azure-format CSV")
    parser.add_argument("--preset", default="llama-70b-bf16-tp4-a100")
    parser.add_argument("--mbu", type=float, default=0.5)
    parser.add_argument("--mfu", type=float, default=0.47)
    parser.add_argument("--host-overhead-us", type=float, default=2500.0)
    parser.add_argument("--sequence-overhead-us", type=float, default=35.0)
    args = parser.parse_args(argv)
    base = presets.load(args.preset)
    hidden = fit.with_terms(
        base,
        {
            "mbu": args.mbu,
            "mfu": args.mfu,
            "host_overhead": args.host_overhead_us * 1e-6,
            "sequence_overhead": args.sequence_overhead_us * 1e-6,
        },
    )
    served = requests(args.trace, base.max_model_len)
    timings = twin.run(hidden, served).timings
    for request, timing in zip(served, timings, strict=True):
        line = capture.log_line(request, timing, model=base.served_model_name, epoch=EPOCH)
        sys.stdout.buffer.write(line + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
