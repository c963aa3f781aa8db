"""The device queue: one holder at a time, bounded waiting, and a busy fraction like a GPU gauge."""

from __future__ import annotations

import asyncio

import pytest

from depthserve.testing.fakes import FakeClock
from depthserve.worker.device_queue import DeviceQueue, QueueFull


async def test_one_at_a_time_in_arrival_order() -> None:
    queue = DeviceQueue(limit=10)
    order: list[int] = []

    async def job(n: int) -> None:
        async with queue.slot():
            assert queue.running == 1
            order.append(n)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(job(n) for n in range(5)))
    assert order == [0, 1, 2, 3, 4] and queue.running == 0 and queue.waiting == 0


async def test_refuses_beyond_the_limit_and_recovers() -> None:
    queue = DeviceQueue(limit=1)
    release = asyncio.Event()

    async def hold() -> None:
        async with queue.slot():
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold())
    await asyncio.sleep(0)
    assert queue.waiting == 1
    with pytest.raises(QueueFull):
        async with queue.slot():
            pass
    release.set()
    await asyncio.gather(holder, waiter)
    async with queue.slot():
        assert queue.running == 1


async def test_cancelled_waiter_leaves_no_trace() -> None:
    queue = DeviceQueue(limit=4)
    release = asyncio.Event()

    async def hold() -> None:
        async with queue.slot():
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert queue.waiting == 0
    release.set()
    await holder
    assert queue.running == 0


async def test_utilisation_is_the_busy_fraction_of_the_window() -> None:
    clock = FakeClock()
    queue = DeviceQueue(limit=1, window_s=10.0, clock=clock)
    async with queue.slot():
        clock.advance(4.0)
        assert queue.utilisation() == pytest.approx(0.4)
    clock.advance(6.0)
    assert queue.utilisation() == pytest.approx(0.4)
    clock.advance(2.0)  # window now starts 2 s into the busy interval: 2 of its 4 s still count
    assert queue.utilisation() == pytest.approx(0.2)
    clock.advance(3.0)
    assert queue.utilisation() == pytest.approx(0.0)


async def test_capacity_is_items_per_busy_second() -> None:
    clock = FakeClock()
    queue = DeviceQueue(limit=1, window_s=10.0, clock=clock)
    assert queue.capacity_rps() == 0.0  # unknown until something ran
    for _ in range(3):
        async with queue.slot():
            clock.advance(0.25)
        clock.advance(1.0)  # idle time does not lower capacity
    assert queue.capacity_rps() == 4.0
    async with queue.slot(items=4):
        clock.advance(0.5)
    assert queue.capacity_rps() == 7 / 1.25


async def test_slots_run_together_and_busy_time_counts_overlaps_once() -> None:
    clock = FakeClock()
    queue = DeviceQueue(limit=1, window_s=10.0, clock=clock, slots=2)
    async with queue.slot(items=3):
        clock.advance(1.0)
        async with queue.slot(items=2):  # a second batch on the device at once: no waiting
            assert queue.running == 5 and queue.waiting == 0
            clock.advance(1.0)
        clock.advance(1.0)
    assert queue.utilisation() == pytest.approx(0.3)  # 3 s busy, not 4
    assert queue.capacity_rps() == pytest.approx(5 / 3)
