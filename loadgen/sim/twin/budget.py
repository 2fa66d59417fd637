"""What the twin's replicas cost in memory, told before any work starts.

Each replica keeps its KV cache's bookkeeping (prefix_cache.BlockPool: a reference count, a
hash slot and a free-queue entry per block), so a thousand replicas of a large preset ask
for gigabytes before the first request. The estimate is checked against half the memory
this process can still have (the machine's available memory, the cgroup's limit, the
address-space limit, whichever is least), the other half left for requests and results.
Pure apart from reading those limits.
"""

from __future__ import annotations

import resource
from pathlib import Path

from loadgen.sim.model.presets import Preset

BYTES_PER_BLOCK = 160  # measured: ~155 B a block for the largest bundled cache, rounded up
BUDGET_SHARE = 0.5  # of the memory left when the work starts


def replicas_bytes(preset: Preset, replicas: int) -> int:
    """The memory `replicas` engines of `preset` take before serving anything."""
    return replicas * (preset.kv_capacity_tokens // preset.engine.block_size) * BYTES_PER_BLOCK


def replicas_fault(flag: str, preset: Preset, replicas: int, available: int | None) -> str | None:
    """The one-line refusal of `flag` when its replicas would not fit; None when they do
    (or when nothing says how much memory there is)."""
    need = replicas_bytes(preset, replicas)
    if available is None or need <= available * BUDGET_SHARE:
        return None
    blocks = preset.kv_capacity_tokens // preset.engine.block_size
    return (
        f"{flag} {replicas}: {replicas} replicas of {preset.name} ({blocks:,} KV blocks each) "
        f"need ~{_gb(need)} of memory to simulate; {_gb(available)} is available, at most "
        f"{BUDGET_SHARE:.0%} of it is used: give at most "
        f"{max(1, int(available * BUDGET_SHARE // (need / replicas)))}"
    )


def available_bytes() -> int | None:
    """The memory this process can still take: the least of the machine's available memory,
    the cgroup's remaining limit and the address space left; None when none is known."""
    limits = [_meminfo_available(), _cgroup_left(), _address_space_left()]
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((root / "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def _address_space_left() -> int | None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, soft - pages * resource.getpagesize())


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"
