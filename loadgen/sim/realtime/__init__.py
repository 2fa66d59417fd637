"""The engine model in real time: what a simulated server runs behind its routes, and what it
exposes about itself.

- `batching.py` the continuous-batching engine in real time
- `fixed.py` fixed timing: an exact test upstream
- `clock.py` waiting for a point on the schedule
- `metrics.py` /metrics: vLLM's series and DCGM-like GPU gauges
- `tracing.py` vLLM's llm_request span
"""
