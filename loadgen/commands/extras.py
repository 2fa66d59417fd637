"""What a command needs beyond the core install, checked before it is imported."""

from __future__ import annotations

import importlib.util
import sys

LOADGEN = ("numpy", "matplotlib", "aiohttp")
LOCUST = (*LOADGEN, "locust", "gevent", "geventhttpclient")


def require(extra: str, modules: tuple[str, ...], prog: str) -> None:
    """Exit 2 naming the pip command when one of an extra's packages is missing: a clear
    line instead of a traceback from deep inside the first import."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"{prog}: error: {', '.join(missing)} not installed; "
            f"pip install 'latency-proxy[{extra}]'",
            file=sys.stderr,
        )
        raise SystemExit(2)
