"""One request, in order: checked, routed, admitted, sent upstream, its answer relayed and
recorded.

The layer between the two connections: it reads from server/ (the client side) and upstream/
(the proxy's own HTTP client), measures with measure/, and hands the finished record to
telemetry/.

- `forward.py` the main port: check, route, admit, hand to the call
- `request.py` the few headers read, and the body within its limits
- `identity.py` the caller's request id kept, or a UUID minted
- `models_list.py` GET /v1/models across every route
- `call.py` an admitted request sent to its route, every failure mapped
- `relay.py` the hot path: upstream bytes to the client as they arrive
- `usage_filter.py` the usage chunk the proxy asked for, taken back
- `responses.py` the proxy's own answers, OpenAI-style
"""
