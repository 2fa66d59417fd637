"""Every private part of uvicorn the proxy relies on, named once.

The client side's limits, timers and direct body writes (http_protocol.py) live in a
subclass of uvicorn's httptools protocol and read the fields of its per-request cycle:
nothing in uvicorn's public API lets an app enforce a head limit as bytes arrive, abort a
connection, or write a body from a callback without an ASGI send per chunk. These names
are not a contract uvicorn keeps; tests/proxy/server/test_uvicorn_internals.py checks each one
on the installed uvicorn and fails by name when a release renames or reshapes it. Without
them (another ASGI server, or httpx's ASGI transport), ProxyApp still works through plain
ASGI messages (http_protocol.client_writer), slower.
"""

from __future__ import annotations

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["FlowControl", "HttpToolsProtocol", "RequestResponseCycle"]

# the protocol's methods the subclass overrides or calls, with their parameters
PROTOCOL_METHODS: dict[str, tuple[str, ...]] = {
    "connection_made": ("self", "transport"),
    "connection_lost": ("self", "exc"),
    "data_received": ("self", "data"),
    "on_message_begin": ("self",),
    "on_headers_complete": ("self",),
    "on_response_complete": ("self",),
    "resume_writing": ("self",),
    "timeout_keep_alive_handler": ("self",),
}
# the protocol's fields it reads (set by connection_made and the parser callbacks)
PROTOCOL_FIELDS = ("transport", "loop", "cycle", "scope", "flow")
# the cycle's fields it reads or sets, and what the direct writer relies on them meaning
CYCLE_FIELDS = (
    "scope",
    "transport",
    "flow",  # its FlowControl (below)
    "disconnected",  # True: nothing more is sent
    "keep_alive",  # False: the connection closes after this response
    "response_started",
    "response_complete",
    "chunked_encoding",  # None until the head is sent, then whether the body is chunked
    "message_event",  # set to wake the app's receive()
    "body",  # what arrived of the body and receive() has not returned yet (a bytearray)
    "more_body",  # False once the body is complete
    "waiting_for_100_continue",  # receive() still owes the client a 100 Continue
)
CYCLE_METHODS: dict[str, tuple[str, ...]] = {"send": ("self", "message")}
# the cycle's flow control: whether the client's buffer is over the high-water mark, and
# the wait until it drained
FLOW_FIELDS = ("write_paused",)
FLOW_METHODS: dict[str, tuple[str, ...]] = {"drain": ("self",)}
