"""The chart model both reports draw: PNG and SVG series from the same points, and a CDF thinned
without losing its extremes."""

from __future__ import annotations

from pathlib import Path

from loadgen.analysis.summary import summarize_run
from loadgen.reports.charts import run as charts
from loadgen.reports.charts.model import MAX_CDF_POINTS, cdf, thin
from loadgen.runs import rundir


def test_png_and_svg_draw_the_same_series(run_dir: Path) -> None:
    data = rundir.read(run_dir)
    summary = summarize_run(data)
    figure = charts.cdfs(data, summary)
    ttft = next(c for c in figure.charts if c.key == "cdf-ttft")
    for series in ttft.series:
        values = sorted(
            r.ttft_s * 1e3 for r in data.records
            if r.target == series.name and r.ok and not r.excluded and r.ttft_s is not None
        )  # fmt: skip
        assert series.points[0] == (values[0], 1 / len(values))
        assert series.points[-1] == (values[-1], 1.0)


def test_downsampling_keeps_the_extremes() -> None:
    values = [float(i) for i in range(10_000)]
    points = cdf(values)
    assert len(points) == MAX_CDF_POINTS
    assert points[0] == (0.0, 1e-4) and points[-1] == (9999.0, 1.0)
    spikes = [(float(i), 1000.0 if i % 997 == 0 else 1.0) for i in range(5000)]
    kept = thin(spikes)
    assert len(kept) <= 1500 and all(i in kept for i in range(0, 5000, 997))
