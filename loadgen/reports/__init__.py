"""What a person reads: report.md, report.html, the PNGs and console lines of each command,
drawn from summary.json and capacity.json; charts/ computes each chart once for PNG and SVG.

- `run.py` a run directory's report.md, report.html, PNGs and console table
- `slowest.py` the slowest requests of each target, as both reports show them
- `comparison.py` targets side by side, with verdicts (report.md's section and `compare`)
- `capacity.py` a capacity search's capacity.json, report.md, report.html and PNGs
- `plan.py` a plan's plan.json, plan.md, plan.html and PNG
- `formatting.py` how a figure is written everywhere
- `charts/` every chart, computed once
- `html/` report.html pages
"""
