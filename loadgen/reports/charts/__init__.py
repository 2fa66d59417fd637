"""Every chart of a report, computed once: series in, PNG (matplotlib) and SVG (HTML) out.

`model` holds what a chart is (points, axes, labels, marks), `run` and `capacity` compute
them from a run's records and summary or from capacity.json, and `png` and `svg` draw the
same objects, so the picture in report.md and the chart in report.html cannot disagree.
"""
