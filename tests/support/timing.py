"""Measurement-correctness tolerances, one for every timing test."""

from __future__ import annotations

# Measurement-correctness tolerances. A figure may not come out earlier than what the scripted
# side waited (beyond timer granularity), but a noisy 2-core box delivers late: stalls of
# ~0.1 s were seen in CI. Tight below, wide above.
EARLY = 0.005
LATE = 0.15


def on_time(measured: float, scripted: float) -> bool:
    return scripted - EARLY <= measured <= scripted + LATE
