"""The client side: HTTP/1.1 connections on uvicorn, the limits and timers on their bytes, and
how a relayed body is written back. It knows the ASGI interface, nothing of what a request
means.

- `http_protocol.py` uvicorn's httptools protocol with the limits and timers of every phase
- `http10.py` an HTTP/1.0 request's response, framed as a 1.0 client reads it
- `uvicorn_internals.py` every private part of uvicorn relied on, named once
- `extensions.py` the scope extensions offered to the app, and the shared error body
- `writers.py` a relayed body written straight onto the transport
- `write_watch.py` the watch for a client that stops reading
"""
