"""Telemetry: the content policy, instruments and names, OTel/Prometheus providers, spans, metrics
and logs; the single place a finished request is recorded.
"""
