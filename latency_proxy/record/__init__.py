"""A request's record: what happened to one exchange (outcome, model call, timings), nothing more.

Written by forwarding/, read by telemetry/; it holds data, not behaviour.
"""
