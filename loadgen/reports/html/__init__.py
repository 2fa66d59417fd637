"""report.html: one self-contained page per run, sweep, comparison or capacity search.

Nothing on the page leaves it: the styles and the few lines of script (hover values) are
inline, the charts are inline SVG (loadgen.reports.charts.svg), there are no fonts, images or links
to fetch but the ones the user asked for (--trace-url).
"""
