"""The recorder writes every record exactly once, in order, with a bounded queue."""

from __future__ import annotations

import asyncio

from latency_proxy.telemetry.recorder import MAX_PENDING, Recorder


def test_records_off_the_request_path_in_order_and_once() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> None:
        recorder: Recorder[int] = Recorder(lambda n, t_end: log.append((n, t_end)))
        for n in range(10):
            recorder.submit(n, float(n))
        assert log == []  # nothing written inline
        await asyncio.sleep(0)
        assert len(log) == 1  # one record per loop turn
        for _ in range(100):  # the recorder alone writes the rest: no flush here
            if len(log) == 10:
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # a turn more: nothing is written twice

    asyncio.run(go())
    assert log == [(n, float(n)) for n in range(10)]


def test_queue_is_bounded_under_a_flood() -> None:
    log: list[tuple[int, float]] = []

    async def go() -> int:
        recorder: Recorder[int] = Recorder(lambda n, t_end: log.append((n, t_end)))
        for n in range(MAX_PENDING * 3):
            recorder.submit(n, 0.0)
        written_inline = len(log)
        recorder.flush()  # what shutdown does
        return written_inline

    assert asyncio.run(go()) == MAX_PENDING * 2  # the oldest went out as new ones came in
    assert [n for n, _ in log] == list(range(MAX_PENDING * 3))
