"""The write queue writes every record exactly once, in order, with a bounded queue."""

from __future__ import annotations

import asyncio

from latency_proxy.telemetry.write_queue import MAX_PENDING, WriteQueue


def test_records_off_the_request_path_in_order_and_once() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> None:
        queue: WriteQueue[int] = WriteQueue(lambda n, t_end: log.append((n, t_end)))
        for n in range(10):
            queue.submit(n, float(n))
        assert log == []  # nothing written inline
        await asyncio.sleep(0)
        assert len(log) == 1  # one record per loop turn
        for _ in range(100):  # the queue alone writes the rest: no flush here
            if len(log) == 10:
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # a turn more: nothing is written twice

    asyncio.run(go())
    assert log == [(n, float(n)) for n in range(10)]


def test_queue_is_bounded_under_a_flood() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> int:
        queue: WriteQueue[int] = WriteQueue(lambda n, t_end: log.append((n, t_end)))
        for n in range(MAX_PENDING * 3):
            queue.submit(n, 0.0)
        written_inline = len(log)
        queue.flush()  # what shutdown does
        return written_inline

    assert asyncio.run(go()) == MAX_PENDING * 2  # the oldest went out as new ones came in
    assert [n for n, _ in log] == list(range(MAX_PENDING * 3))
