"""The Locust engine: loadgen's workload and measurements under Locust.

`LoadgenUser` is loaded on first use, not at import: importing Locust patches the whole
process for gevent, which the engine's pure parts (run.py) must not cause.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LoadgenUser":
        from loadgen.locust.user import LoadgenUser

        return LoadgenUser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
