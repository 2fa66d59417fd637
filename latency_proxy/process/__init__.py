"""One proxy process: its listening sockets and uvicorn servers, the main port's ASGI app,
the admin port's, and the state the two share. The command serves with them in one
process; under --workers the supervisor and each worker compose them.

- `serving.py` the listening sockets, the uvicorn servers, the start line and the signals
- `app.py` the main port's ASGI app and its lifespan
- `admin.py` the admin port: /metrics, /healthz, /readyz
- `state.py` what the main and admin apps of one process share
"""
