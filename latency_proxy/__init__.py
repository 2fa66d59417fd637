"""latency-proxy: a measuring streaming reverse proxy for OpenAI-compatible LLM servers.

The top level is the entry and the composition root, imported by nothing below it; each
folder is a layer or a seam, and imports go down: workers/ over process/, over forwarding/,
over server/, upstream/ and telemetry/, over record/, over measure/, all standing on base/.
A request flows socket → server/ → process/'s app → forwarding/ → upstream/, and its answer
back through forwarding/'s relay into server/'s writers; telemetry/ records it at the end.

- `cli.py` flags, environment and config file to Settings, then one process or workers
- `workers/` several processes on one port, under a supervisor (--workers)
- `process/` one process: its sockets, uvicorn servers, main and admin apps
- `server/` the client side on uvicorn
- `forwarding/` one request, in order
- `upstream/` the proxy's own HTTP/1.1 client
- `telemetry/` spans, metrics and logs of a finished request, and the content policy
- `record/` what happened to one request
- `measure/` the pure measuring core, shared with loadgen
- `base/` the settings, units, ASGI types, telemetry names and build every layer stands on
"""

from latency_proxy.base import build

build.choose()  # before any compiled module is imported: LATENCY_PROXY_PURE=1 loads the .py

__version__ = build.VERSION
