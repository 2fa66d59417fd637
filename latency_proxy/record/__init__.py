"""A request's record: what happened to one exchange (outcome, model call, timings), nothing
more. Written by forwarding/, read by telemetry/; it holds data, not behaviour.

- `exchange.py` one proxied request from arrival to last byte
- `model_call.py` what the proxy reads from (and adds to) the request body
- `outcome.py` how a request ended, and what went wrong upstream
- `session.py` where a chat call stands in its agent's session
- `span.py` a span of the request as plain data, until telemetry/ ends it
"""
