"""latency-proxy: a measuring streaming reverse proxy for OpenAI-compatible LLM servers.

The top level is the entry and the composition root; each folder below is a layer or a seam,
and imports go down: forwarding/ over server/, upstream/ and telemetry/, over record/, over
measure/. A request flows socket → server/ → app → forwarding/ → upstream/, and its answer
back through forwarding/'s relay into server/'s writers; telemetry/ records it at the end.

- `cli.py` flags, environment and config file to Settings, then serving
- `serving.py` one process's listening sockets and uvicorn servers
- `app.py` the main port's ASGI app and its lifespan
- `admin.py` the admin port: /metrics, /healthz, /readyz
- `state.py` what the main and admin apps of one process share
- `config.py` Settings, read by every layer (as uvicorn's own config is)
- `setting_types.py` each setting's declared type and range (loadgen's flags share them)
- `units.py` durations and sizes as people write them
- `types.py` the ASGI interface the proxy is written against
- `native.py` which modules are compiled (mypyc), and whether this process runs them so
- `server/` the client side on uvicorn
- `forwarding/` one request, in order
- `upstream/` the proxy's own HTTP/1.1 client
- `telemetry/` spans, metrics and logs of a finished request, and the content policy
- `record/` what happened to one request
- `measure/` the pure measuring core, shared with loadgen
- `workers/` several processes on one port, under a supervisor (--workers)
"""

from latency_proxy import native

native.choose()  # before any compiled module is imported: LATENCY_PROXY_PURE=1 loads the .py

__version__ = "0.1.0"
