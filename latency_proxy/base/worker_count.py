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

from latency_proxy.base.setting_types import Number

# descriptors the supervisor holds per worker: its listening socket, its process sentinel,
# the pipe it says it is ready on, its metric store
FDS_PER_WORKER = 4
FDS_RESERVED = 64  # the supervisor's own: admin port, probes, logs, imports
# a worker is a whole interpreter (some 100 MB with its store); past one per CPU more add
# memory and context switches, not throughput. The most a host in use has stays below it,
# and a typo (10000) does not fork the host to death.
MAX_WORKERS = 1024


class WorkerCount:
    """The --workers setting's type: a whole number from 1 to MAX_WORKERS, or auto; at
    most what the file-descriptor limit lets the supervisor hold."""

    limits = f"1 to {MAX_WORKERS}, or auto"
    metavar = "N|auto"

    def read(self, value: object) -> int:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return min(usable_cpus(), MAX_WORKERS)
        count = int(Number(1, MAX_WORKERS, "a worker count or auto", whole=True).read(value))
        problem = check_workers(count)
        if problem is not None:
            raise ValueError(problem)
        return count


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
        limit, _, every = (root / "cpu.max").read_text().partition(" ")
        return None if limit == "max" else int(limit) / int(every)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def check_workers(count: int) -> str | None:
    """Why `count` workers cannot run here, or None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if hard == resource.RLIM_INFINITY else hard  # the start raises soft to hard
    if limit != resource.RLIM_INFINITY:
        most = (limit - FDS_RESERVED) // FDS_PER_WORKER
        if count > most:
            return (
                f"{count}: the file-descriptor limit ({limit}, ulimit -Hn) allows "
                f"at most {max(most, 0)} workers"
            )
    return None
