"""Request identity: keep a well-formed caller id, otherwise mint a UUID4."""

from __future__ import annotations

import re
import uuid

_VALID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def request_id_from(header: bytes | None) -> str:
    """A caller's X-Request-ID if it is safe to log and forward, else a fresh UUID4."""
    if header is not None and _VALID.fullmatch(header):
        return header.decode("ascii")
    return str(uuid.uuid4())
