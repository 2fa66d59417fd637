"""Analysis, pure (no I/O but the one scrape in server_metrics): records in, figures and
verdicts out.

- `records.py` the raw data of a run
- `summary.py` records in, summary.json out
- `compat.py` the same requests under vLLM bench serve's and AIPerf's definitions
- `server_signals.py` reasoning, prefix cache, stalls and GPU memory and power
- `stats.py` percentiles, confidence intervals, goodput, MBU
- `steady.py` steady state or saturated
- `settle.py` when a warm-up has reached its steady state
- `slo.py` the latency limits runs are judged against
- `slices.py` a run in time slices
- `timesplit.py` where the time went, from the servers' parts
- `server_metrics.py` the servers' own Prometheus metrics around a window
- `evals.py` eval items: read from JSON lines or generated (the canaries), and scored
- `quality.py` accuracy's interval and whether it changed, in words
- `consistency.py` greedy outputs alone and under load, compared
- `cost.py` $/Mtok from a GPU-hour price, J/token from GPU power
- `checked.py` the sentences for answers, consistency, cost and energy
- `sessions.py` agents' sessions, from the proxy's capture or a run's records: time, model vs
  tools, prefix hits, TTFT by turn
"""
