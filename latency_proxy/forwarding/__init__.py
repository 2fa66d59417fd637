"""One request, in order: checked, routed, admitted, sent upstream, its answer relayed and recorded.

The layer between the two connections: it reads from server/ (the client side) and upstream/
(the proxy's own HTTP client), measures with measure/, and hands the finished record to telemetry/.
"""
