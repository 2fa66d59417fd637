"""The process's open-file limit: the soft limit raised to the hard one at start (what
nginx's worker_rlimit_nofile lets operators do), and running out of it reported as the
proxy's own failure, once per burst.

Every client connection and every upstream connection holds a file descriptor; the soft
limit, often 1024, is reached long before a GPU server's concurrency is. Past it a
connect fails with EMFILE, which is not the upstream's fault and must not be counted as
one.
"""

from __future__ import annotations

import errno
import logging
import math
import resource
import time

log = logging.getLogger("latency_proxy")
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})  # the process's, the system's table
QUIET_S = 10.0  # a burst ends after this long without running out


def raise_soft_limit() -> tuple[int, int]:
    """Set the soft limit to the hard one; (the limit now, the limit before)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # an unlimited hard limit past the kernel's nr_open
            return soft, soft
        return hard, soft
    return soft, soft


class Exhaustion:
    """Logs running out of file descriptors at the start of each burst of it."""

    def __init__(self) -> None:
        self._last = -math.inf

    def ran_out(self, code: int | None) -> None:
        now = time.monotonic()
        if now - self._last > QUIET_S:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            table = "the system's" if code == errno.ENFILE else "this process's"
            log.error(
                "out of file descriptors (%s limit, open files %d): new connections fail "
                "as proxy_error until some close; raise the hard limit (ulimit -n, "
                "LimitNOFILE=, the container runtime's nofile)",
                table,
                limit,
            )
        self._last = now


EXHAUSTION = Exhaustion()  # one per process, as the limit is
