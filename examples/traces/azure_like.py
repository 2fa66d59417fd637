"""Write a synthetic trace shaped like the Azure LLM inference conversation trace.

The public traces cannot always be fetched (air-gapped benches, CI); this makes a stand-in
of the same shape in the same format (Azure 2023 CSV: `TIMESTAMP,ContextTokens,
GeneratedTokens`, 100 ns ticks), so every replay command can be tried on it. The shape
follows what the Splitwise paper reports for the conversation trace: prompts with a median
near 1,020 tokens and outputs near 129, both long-tailed (lognormal), and arrivals that are
burstier than Poisson (gamma gaps) under a slow swell of the rate over the hour.

    python examples/traces/azure_like.py --minutes 60 --rate 2 > azure_like.csv
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import UTC, datetime, timedelta

import numpy as np

START = datetime(2023, 11, 16, 18, 0, 0, tzinfo=UTC)


def rows(minutes: float, rate: float, seed: int) -> list[tuple[float, int, int]]:
    """(seconds from the start, prompt tokens, output tokens), in time order."""
    rng = np.random.default_rng(seed)
    shape = 0.5  # gamma gaps: coefficient of variation 1.4, burstier than Poisson
    horizon, t = minutes * 60, 0.0
    out: list[tuple[float, int, int]] = []
    while True:
        # the rate swells to 1.6x and back over 20 minutes, as a busy hour's load does
        now = rate * (1 + 0.6 * math.sin(2 * math.pi * t / 1200) ** 2)
        t += float(rng.gamma(shape, 1 / (now * shape)))
        if t >= horizon:
            return out
        prompt = int(min(8000, max(8, rng.lognormal(math.log(1020), 0.9))))
        output = int(min(2000, max(1, rng.lognormal(math.log(129), 0.8))))
        out.append((t, prompt, output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=2.0, help="mean requests/s at the trough")
    parser.add_argument("--seed", type=int, default=2023)
    args = parser.parse_args(argv)
    write = sys.stdout.write
    write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    for t, prompt, output in rows(args.minutes, args.rate, args.seed):
        stamp = START + timedelta(seconds=t)
        write(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,{prompt},{output}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
