"""What this build is: its version, which modules are compiled, and whether this process
runs them compiled or pure.

The hot path (the measuring core, the request's way through forwarding/ and the relay,
the upstream client, the client-side writers, the per-request record and its writers) is
compiled by mypyc from the same typed source when the build had a C compiler and mypy
(setup.py); every .py file ships beside its extension and is the fallback. An extension
module shadows its .py file on import, so `LATENCY_PROXY_PURE=1` at run time puts a finder
first on sys.meta_path that loads these modules from source: the modules are compiled as
one group that calls across itself natively, so it runs all compiled or all pure, never
mixed. Nothing here may import the rest of the package: setup.py reads COMPILED from this
file before anything is built.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

VERSION = "0.1.0"
PURE_ENV = "LATENCY_PROXY_PURE"  # at build time: build no extension; at run time: load none
COMPILED = (
    "latency_proxy.measure.coalescing",
    "latency_proxy.measure.event_shape",
    "latency_proxy.measure.meter",
    "latency_proxy.measure.payload",
    "latency_proxy.measure.server_report",
    "latency_proxy.measure.sse",
    "latency_proxy.record.exchange",
    "latency_proxy.record.model_call",
    "latency_proxy.record.outcome",
    "latency_proxy.forwarding.call",
    "latency_proxy.forwarding.forward",
    "latency_proxy.forwarding.identity",
    "latency_proxy.forwarding.relay",
    "latency_proxy.forwarding.request",
    "latency_proxy.forwarding.responses",
    "latency_proxy.forwarding.usage_filter",
    "latency_proxy.server.write_watch",
    "latency_proxy.server.writers",
    "latency_proxy.upstream.connection",
    "latency_proxy.upstream.pool",
    "latency_proxy.upstream.routes",
    "latency_proxy.telemetry.access_log",
    "latency_proxy.telemetry.metrics",
    "latency_proxy.telemetry.write_queue",
    "latency_proxy.telemetry.request_writer",
    "latency_proxy.telemetry.spans",
)


def pure_requested(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """LATENCY_PROXY_PURE set to anything but empty or 0."""
    return environ.get(PURE_ENV, "") not in ("", "0")


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' .py files, ahead of the extensions beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            source = os.path.join(entry, name)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def choose() -> None:
    """At the package's import: with LATENCY_PROXY_PURE set, the .py files win."""
    if pure_requested() and not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())


def running() -> str:
    """How the hot path runs: "compiled" when every module of COMPILED loads (or loaded) as
    an extension, "pure" when none does; "mixed" would be a broken build, and says so."""
    kinds = {_kind(name) for name in COMPILED}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _kind(name: str) -> str:
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return "compiled" if origin is not None and origin.endswith(suffixes) else "pure"
