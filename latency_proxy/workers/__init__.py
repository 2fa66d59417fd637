"""Several proxy processes on one port (--workers): the supervisor that starts, watches,
restarts and drains them, and the sum of their metric stores that its admin port serves.

- `supervisor.py` starts the workers, restarts one that dies, drains them, serves admin
- `worker.py` one worker process: the main port on a socket its supervisor made
- `merged.py` the workers' stores summed into one process's /metrics page
"""
