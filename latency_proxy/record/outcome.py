"""How a request ended, and what went wrong upstream.

The values are the `outcome` and `kind` metric labels, the `latency_proxy.outcome` span
attribute and the log line's `outcome` (docs/proxy/metrics.md): str-valued, so they are
written as is.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    CLIENT_ABORT = "client_abort"
    REJECTED = "rejected"  # refused by the proxy: limits, unknown model, concurrency
    PROXY_ERROR = "proxy_error"  # the proxy's own failure, or a stream cut at the end of a drain

    @property
    def routine(self) -> bool:
        """Nothing went wrong that an operator must look at (logged at INFO)."""
        return self is Outcome.OK or self is Outcome.REJECTED


class UpstreamErrorKind(StrEnum):
    CONNECT = "connect"  # refused or unreachable
    TIMEOUT = "timeout"  # silent past the read timeout, before or after the headers
    PROTOCOL = "protocol"  # the HTTP exchange broke (e.g. the upstream died mid-stream)
    STATUS = "status"  # answered with a 5xx

    @property
    def outcome(self) -> Outcome:
        """How a request this happened to ended."""
        if self is UpstreamErrorKind.TIMEOUT:
            return Outcome.UPSTREAM_TIMEOUT
        return Outcome.UPSTREAM_ERROR

    @property
    def transport(self) -> bool:
        """The upstream did not deliver an HTTP answer (unlike a 5xx it did send)."""
        return self is not UpstreamErrorKind.STATUS
