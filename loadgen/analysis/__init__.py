"""Analysis, pure (no I/O but the one scrape in server_metrics): records in, figures and
verdicts out: percentiles and intervals, summaries, steady state, SLOs, slices, and where the
time went.
"""
