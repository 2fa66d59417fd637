"""The upstream side, the proxy's own HTTP/1.1 client (uvloop + httptools).

- `connection.py` one connection: a request written whole, its response read as it comes
- `pool.py` a route's pool of connections, idle ones reused newest first
- `routes.py` one pool per route, and header hygiene in both directions
- `probe.py` the proxy's own short GETs: readiness and listings
- `fd_limit.py` the open-files limit raised at start, and running out of it
"""
