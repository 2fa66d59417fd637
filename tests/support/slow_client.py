"""A client that sends a byte every so often: never silent, never done (slowloris)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def trickling(sock: socket.socket, byte: bytes, every: float = 0.05) -> Iterator[None]:
    """Send `byte` on `sock` every `every` seconds until the block ends or the send fails."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(every):
            try:
                sock.send(byte)
            except OSError:
                return

    sender = threading.Thread(target=trickle)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join()
