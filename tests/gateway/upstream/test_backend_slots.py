"""The gateway's wait for a free backend slot: oldest first, and no wake-up lost to a cancelled waiter."""

from __future__ import annotations

import asyncio

from depthserve.gateway.upstream.backend_slots import SlotQueue


async def test_freed_slots_wake_waiters_oldest_first() -> None:
    slots = SlotQueue()
    woken: list[int] = []

    async def waiter(index: int) -> None:
        assert await slots.wait(5.0)
        woken.append(index)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert slots.waiting == 3 and slots.has_waiters()
    for _ in range(3):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert woken == [0, 1, 2] and slots.waiting == 0 and slots.waited == 3


async def test_a_returning_waiter_goes_to_the_front() -> None:
    slots = SlotQueue()
    order: list[str] = []

    async def waiter(name: str, returning: bool) -> None:
        await slots.wait(5.0, returning)
        order.append(name)

    late = asyncio.create_task(waiter("new", False))
    await asyncio.sleep(0)
    back = asyncio.create_task(waiter("returning", True))
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0.01)
    assert order == ["returning"]
    slots.release()
    await asyncio.gather(late, back)
    assert slots.waited == 1  # a returning waiter is not counted twice


async def test_a_waiter_cancelled_after_its_wake_up_passes_it_on() -> None:
    slots = SlotQueue()
    first = asyncio.create_task(slots.wait(5.0))
    second = asyncio.create_task(slots.wait(5.0))
    await asyncio.sleep(0)
    slots.release()  # wakes the first ...
    first.cancel()  # ... which gives up before it could use the slot
    assert await second is True
    assert first.cancelled()


async def test_wait_times_out_and_leaves_the_queue() -> None:
    slots = SlotQueue()
    assert await slots.wait(0.01) is False
    assert slots.waiting == 0 and not slots.has_waiters()


async def test_pools_wait_apart_and_a_slot_wakes_a_waiter_of_a_model_it_serves() -> None:
    slots = SlotQueue()
    older = asyncio.create_task(slots.wait(5.0, key="busy-model"))
    newer = asyncio.create_task(slots.wait(5.0, key="idle-model"))
    await asyncio.sleep(0)
    assert slots.has_waiters("busy-model") and not slots.has_waiters("other-model")
    slots.release(lambda model: model == "idle-model")  # freed on a backend of the idle model only
    assert await newer is True
    assert not older.done() and slots.waiting == 1
    slots.release()
    assert await older is True
