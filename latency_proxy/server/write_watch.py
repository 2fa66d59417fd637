"""The watch for a client that stops reading without closing (--write-timeout).

Such a client does not disconnect: its receive window closes, the proxy's write buffer
fills, the relay stops reading the upstream (relay.Backpressure), and the stream — with its
upstream connection, and the request in vLLM's batch — is pinned until the upstream gives
up. The watch counts the writes that started and finished (ASGI sends, and the waits of the
relay's direct writes: `held`/`released`); a tick every quarter of the timeout sees one
pending without progress, and after the timeout ends the exchange as the client's
(`client_abort`, `write_timeout`). Nothing is counted per event unless the buffer fills;
the clock is read per tick, not per write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from latency_proxy.base.asgi import Message, Send


class WriteWatch:
    __slots__ = ("_handle", "_last", "_send", "_stuck", "_timeout", "stalled", "writes")

    def __init__(self, send: Send, timeout: float) -> None:
        self._send = send
        self._timeout = timeout  # 0: never
        self.writes = 0  # odd while a send is pending
        self.stalled = False
        self._last = 0
        self._stuck = 0.0
        self._handle: asyncio.TimerHandle | None = None

    async def send(self, message: Message) -> None:
        self.writes += 1
        await self._send(message)
        self.writes += 1

    @property
    def unwatched_send(self) -> Send:
        """The server's send, for a writer whose waits are counted by held/released."""
        return self._send

    def held(self) -> None:
        """A write outside `send` filled the client's buffer: pending until released."""
        self.writes += 1

    def released(self) -> None:
        self.writes += 1

    def start(self, on_stall: Callable[[], None]) -> None:
        """Tick until stop(); on_stall runs once, when one send waited past the timeout."""
        if self._timeout > 0:
            self._arm(on_stall)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, on_stall: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self._timeout / 4, self._tick, on_stall)

    def _tick(self, on_stall: Callable[[], None]) -> None:
        writes = self.writes
        if writes % 2 and writes == self._last:
            self._stuck += self._timeout / 4
            if self._stuck >= self._timeout:
                self.stalled = True
                self._handle = None
                on_stall()
                return
        else:
            self._last, self._stuck = writes, 0.0
        self._arm(on_stall)
