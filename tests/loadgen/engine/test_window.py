"""The warmup/measured/cooldown rule, written once (loadgen/engine/window.py), as both
engines use it."""

from __future__ import annotations

import asyncio

from loadgen.engine.budget import Budget
from loadgen.engine.schedule import Block
from loadgen.engine.window import COOLDOWN, WARMUP, Window
from loadgen.locust.window import Window as NodeWindow


def test_a_request_is_warmup_measured_or_cooldown_by_when_it_was_intended() -> None:
    w = Window(warm_end=10.0)
    assert w.take(9.99) == WARMUP and w.in_flight == 0
    assert w.take(10.0) is None and w.take(12.0) is None and w.in_flight == 2
    w.close(15.0)
    assert w.take(15.0) == COOLDOWN and w.take(14.0) is None
    assert not w.drained
    for end in (16.0, 17.5, 16.5):
        w.finished(None, end)
    assert w.drained and w.done_at == 17.5
    w.finished(COOLDOWN, 30.0)
    assert w.done_at == 17.5  # cooldown requests never extend the measured window


def test_closing_in_the_warmup_measures_nothing() -> None:
    w = Window(warm_end=10.0)
    w.close(3.0)
    assert w.closed_at == 10.0 and w.take(10.0) == COOLDOWN and w.drained


def test_a_locust_node_seals_once_drained_and_counts_every_request() -> None:
    w = NodeWindow(start=0.0, warmup_s=1.0)
    kinds = [w.take(t) for t in (0.5, 2.0)]
    assert kinds == [WARMUP, None] and w.busy == 2
    w.close(3.0)
    assert w.take(4.0) == COOLDOWN and not w.drained
    w.finished(None, 5.0)
    w.sealed = True
    assert w.drained and not w.idle
    w.finished(WARMUP, 5.0)
    w.finished(COOLDOWN, 6.0)
    assert w.idle and w.done_at == 5.0


def test_a_block_by_duration_and_a_block_by_count_share_the_rule() -> None:
    async def run() -> None:
        timed = Budget(
            Block("a", 0, warmup_s=1.0, duration_s=5.0, requests=None), start=0.0, ramp=1.0
        )
        assert [timed.take(t) for t in (0.5, 1.0, 5.99, 6.0)] == [WARMUP, None, None, COOLDOWN]
        counted = Budget(
            Block("a", 0, warmup_s=1.0, duration_s=None, requests=2), start=0.0, ramp=1.0
        )
        kinds = [counted.take(t) for t in (0.5, 1.0, 2.0, 1.5, 3.0)]
        assert kinds == [WARMUP, None, None, COOLDOWN, COOLDOWN]
        assert counted.closed_at == 2.0 and counted.in_flight == 2
        counted.finished(None)
        assert not counted.over.is_set()
        counted.finished(None)
        assert counted.over.is_set() and counted.drained

    asyncio.run(run())
