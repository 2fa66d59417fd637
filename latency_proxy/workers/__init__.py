"""Several proxy processes on one port (--workers): the supervisor that starts, watches,
restarts and drains them, and the sum of their metric stores that its admin port serves.

- `merged.py` the workers' stores summed into one process's /metrics page
"""
