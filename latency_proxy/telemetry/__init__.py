"""Telemetry: what a finished request leaves behind (spans, metric observations, one log line),
under the content policy, with every name defined once.

- `request_writer.py` the single place a finished request is written: spans, metrics, log line
- `write_queue.py` finished requests written off the request path, one per loop turn
- `redact.py` the content policy: what of prompts and completions is recorded
- `spans.py` the request's SERVER and CLIENT spans
- `tracing.py` spans as plain records, handed to the SDK only when exported
- `otlp_encoding.py` spans to OTLP protobuf bytes, written directly
- `otlp_http.py` the SDK's OTLP/HTTP exporter sending that encoding
- `metrics.py` a model call's metric observations
- `instruments.py` the metric instruments, written to two sinks
- `histogram.py` a Prometheus histogram that takes a request's values in one call
- `buckets.py` histogram boundaries, one list per instrument
- `access_log.py` the one log line per request
- `logs.py` JSON log lines with the request's id and trace context
- `providers.py` OTel export and meters from OTEL_*, and the Prometheus registry
- `export.py` the span queue, and every span or metric point not delivered counted by why
- `loop_lag.py` the proxy's own event-loop lag, and the largest while a request ran
- `worker_store.py` a worker's metric values in shared memory, for its supervisor
- `sessions.py` agent sessions and call graphs from keyed hashes, in a bounded table
"""
