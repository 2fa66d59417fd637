"""report.html: one self-contained page per run, sweep, comparison or capacity search.

Nothing on the page leaves it: styles and the few lines of script (hover values) are inline,
the charts are inline SVG (charts/svg.py), there are no fonts, images or links to fetch but
the ones the user asked for (--trace-url).

- `page.py` the page shell and small HTML helpers
- `run.py` a run directory's page
- `compare.py` the page beside `compare --out FILE.md`
- `capacity.py` a capacity search's page
- `plan.py` a plan's page
"""
