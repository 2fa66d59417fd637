"""The measuring core, pure (no I/O): loadgen imports exactly these, so a figure has one
definition in the proxy and the load generator.

- `sse.py` incremental Server-Sent Events parser
- `meter.py` timestamps and parsed events to RequestTiming (TTFT, TPOT, ITL, chunks)
- `payload.py` what one event's JSON says: kind, ids, finish reasons, text
- `event_shape.py` the bytes a stream's content events share, to skip most JSON parses
- `coalescing.py` whether a stream arrives as generated or in held-back bursts
- `server_report.py` what a server says about one request beyond its token counts
- `conversation.py` a chat conversation as keyed hashes: messages, answer, prefix blocks
"""
