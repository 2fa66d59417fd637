"""The measuring core, pure (no I/O): SSE parsing, the stream meter, event shapes, coalescing and
the server's own report. loadgen imports exactly these, so a figure has one definition in both.
"""
