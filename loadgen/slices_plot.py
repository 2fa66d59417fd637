"""slices.png: each target's time slices (slices.py) on one time axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first

Value = Callable[[dict[str, Any]], float | None]


def _steps(found: Sequence[dict[str, Any]], value: Value) -> tuple[list[float], list[float]]:
    """A step line over the slices; a stretch with none (another target's block) is a gap."""
    xs: list[float] = []
    ys: list[float] = []
    for s in found:
        if xs and s["start_s"] > xs[-1]:
            xs.append(xs[-1])
            ys.append(float("nan"))
        v = value(s)
        xs += [s["start_s"], s["end_s"]]
        ys += [float("nan") if v is None else v] * 2
    return xs, ys


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def plot(summary: dict[str, Any], path: Path) -> None:
    """TTFT P50/P90, output tok/s and the backlog per slice, every target."""
    fig, axes = plt.subplots(3, 1, figsize=(12, 7.5), sharex=True)
    for name, t in summary["targets"].items():
        found = t.get("slices") or []
        for pct, style in (("p50", "-"), ("p90", "--")):
            xs, ys = _steps(found, lambda s, p=pct: _ms(s["ttft_s"][p]))
            axes[0].plot(xs, ys, style, label=f"{name} TTFT {pct.upper()}")
        axes[1].plot(*_steps(found, lambda s: s["output_tokens_per_s"]), label=name)
        axes[2].plot(*_steps(found, lambda s: s["backlog"]), label=name)
    for ax, label in zip(axes, ("TTFT (ms)", "output tok/s", "backlog"), strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[-1].set_xlabel("seconds since the target's first window opened")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
