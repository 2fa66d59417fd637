"""An OTLP/HTTP endpoint that accepts every export and keeps nothing: what the proxy's
exporters talk to in bench/proxy_overhead.py's `proxy+otlp` cell, so the cell measures the
proxy's cost of exporting (spans built and batched, protobuf encoding, the POSTs), not a
collector's. Its own process: its CPU is not charged to the proxy.

    python bench/otlp_sink.py --port 4318
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporters keep their connection

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._answer()

    def do_GET(self) -> None:  # readiness
        self._answer()

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Silent: one line per export would be the sink's only work."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), Sink).serve_forever()


if __name__ == "__main__":
    main()
