"""What a run was, for its report and run.json: the command, the targets (URLs and models, no
headers: they may carry credentials) and where the client ran."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import time
from typing import Any

from loadgen.runs.config import RunConfig


def run_meta(
    config: RunConfig, targets: dict[str, dict[str, str]], prompt_sizing: dict[str, Any] | None
) -> dict[str, Any]:
    """What the run was, for the report; `targets` their URLs and models, no headers (they
    may carry credentials)."""
    return {
        "command": config.command,
        "started_at": time.time(),
        "targets": targets,
        "endpoint": config.endpoint,
        "sweep": config.sweep,
        "levels": list(config.levels),
        "shard": list(config.shard),
        "prompt_sizing": prompt_sizing,
        "trace_url": config.trace_url,
        "environment": environment(),
    }


def environment() -> dict[str, Any]:
    """Where the client ran: what its figures may depend on (its own floor, its versions)."""
    try:
        version = importlib.metadata.version("latency-proxy")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "loadgen": version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
