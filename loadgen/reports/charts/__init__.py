"""Every chart of a report, computed once: series in, PNG (matplotlib) and SVG (HTML) out,
so the picture in report.md and the chart in report.html cannot disagree.

- `model.py` what a chart is (points, axes, labels, marks), independent of drawing
- `run.py` a run's charts: CDFs, timeline, sweep
- `slices.py` the time-slices chart
- `capacity.py` a capacity search's charts
- `plan.py` a plan's cost against headroom
- `png.py` drawn with matplotlib
- `svg.py` drawn as inline SVG
"""
