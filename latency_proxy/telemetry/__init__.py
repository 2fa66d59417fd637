"""Telemetry: instruments and names, OTel/Prometheus providers, spans, metrics, logs."""
