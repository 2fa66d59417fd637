"""The Locust engine: loadgen's workload and measurements under Locust.

`LoadgenUser` is loaded on first use, not at import: importing Locust patches the whole
process for gevent, which the engine's pure parts (run.py) must not cause.

- `engine.py` loadgen as a Locust engine (`locust -f loadgen/locustfile.py`)
- `node.py` what one Locust process runs of loadgen
- `user.py` LoadgenUser, the user that sends loadgen's requests
- `client.py` HTTP under gevent (geventhttpclient)
- `options.py` the custom arguments, typed once per test
- `window.py` one node's measured window
- `table.py` what Locust's table gets of loadgen's records
- `run.py` what a node hands on, and one run directory at the end
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LoadgenUser":
        from loadgen.locust.user import LoadgenUser

        return LoadgenUser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
