"""Ctrl-C and SIGTERM during a run: the first ends it early, the second stops at once.

A run stopped early still writes what it measured (its summary marks the cut). Only while
load is being sent do the signals mean "end the run"; before and after, they have their
default effect.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from loadgen.engine.runner import Runner

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def default_signal_handlers() -> None:
    """Give Ctrl-C and SIGTERM back their default effect (stop at once)."""
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.remove_signal_handler(signum)


def stop_on_signal(runner: Runner, meta: dict[str, Any]) -> None:
    """The first Ctrl-C or SIGTERM ends the run early and keeps what was measured; a second
    one stops at once (the default handlers are back)."""
    loop = asyncio.get_running_loop()

    def interrupt(signum: signal.Signals) -> None:
        default_signal_handlers()
        meta["interrupted_by"] = signum.name
        runner.stop()
        print(
            f"\nloadgen: {signum.name}: ending the run, keeping what was measured "
            "(again to stop at once)",
            file=sys.stderr,
        )

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, interrupt, signum)
