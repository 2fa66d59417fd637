"""How many worker processes: a count, or `auto` for the CPUs this process may use.

`auto` is what the container may use, not what the host has: the CPUs the process is
pinned to (sched_getaffinity), capped by the cgroup's CPU quota (`cpu.max` in cgroup v2,
`cpu.cfs_quota_us` / `cpu.cfs_period_us` in v1), rounded up: a pod limited to 1.5 CPUs
gets 2 workers.
"""

from __future__ import annotations

import math
import os
import resource
from pathlib import Path

# descriptors the supervisor holds per worker: its listening socket, its process sentinel,
# the pipe it says it is ready on, its metric store
FDS_PER_WORKER = 4
FDS_RESERVED = 64  # the supervisor's own: admin port, probes, logs, imports


def parse_workers(value: object) -> int:
    """'auto' → the usable CPUs; else a whole number (range checked by `check_workers`)."""
    text = str(value).strip().lower()
    if text == "auto":
        return usable_cpus()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not a worker count: {value!r} (use a whole number or auto)") from None


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may run on, capped by its cgroup's quota."""
    cpus = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def _cgroup_quota(root: Path) -> float | None:
    """The CPU quota in CPUs, None when unlimited or unknown."""
    try:
        limit, _, period = (root / "cpu.max").read_text().partition(" ")
        return None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def check_workers(count: int) -> str | None:
    """Why `count` workers cannot run here, or None."""
    if count < 1:
        return f"--workers {count}: give 1 or more, or auto"
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        most = (soft - FDS_RESERVED) // FDS_PER_WORKER
        if count > most:
            return (
                f"--workers {count}: the file-descriptor limit ({soft}, ulimit -n) allows "
                f"at most {max(most, 0)} workers"
            )
    return None
