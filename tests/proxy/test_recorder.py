"""The recorder writes every record exactly once, in order, with a bounded queue."""

from __future__ import annotations

import asyncio

from latency_proxy.recorder import MAX_PENDING, Recorder


class Finished:
    def __init__(self, log: list[tuple[int, float]], n: int) -> None:
        self.log, self.n = log, n

    def finish(self, t_end: float) -> None:
        self.log.append((self.n, t_end))


def test_records_off_the_request_path_in_order_and_once() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> None:
        recorder = Recorder()
        for n in range(10):
            recorder.submit(Finished(log, n), float(n))  # type: ignore[arg-type]
        assert log == []  # nothing written inline
        for _ in range(20):
            await asyncio.sleep(0)
        recorder.flush()

    asyncio.run(go())
    assert log == [(n, float(n)) for n in range(10)]


def test_queue_is_bounded_under_a_flood() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> int:
        recorder = Recorder()
        for n in range(MAX_PENDING * 3):
            recorder.submit(Finished(log, n), 0.0)  # type: ignore[arg-type]
        written_inline = len(log)
        recorder.flush()
        return written_inline

    assert asyncio.run(go()) == MAX_PENDING * 2  # the oldest went out as new ones came in
    assert [n for n, _ in log] == list(range(MAX_PENDING * 3))
