"""What a person reads: report.md, report.html, the PNGs and console lines of each command,
drawn from summary.json and capacity.json; charts/ computes each chart once for PNG and SVG.
"""
