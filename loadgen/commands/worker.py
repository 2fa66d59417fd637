"""`python -m loadgen.commands.worker`: one process of a --workers run; internal, the
supervisor (shards/supervisor.py) starts it.

Its configuration arrives as a RunConfig in JSON on stdin rather than as a command line, so
what the supervisor decided (shard, run directory, sync point, targets) comes typed, with
nothing to re-parse. It then runs, prints and exits as `python -m loadgen` would.
"""

from __future__ import annotations

import sys

from loadgen.commands import run
from loadgen.runs.config import RunConfig


def main() -> int:
    return run.main(RunConfig.from_json(sys.stdin.read()))


if __name__ == "__main__":
    sys.exit(main())
