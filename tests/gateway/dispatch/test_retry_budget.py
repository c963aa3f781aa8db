"""The retry budget: a floor of concurrent retries, then a share of active requests."""

from __future__ import annotations

import asyncio

from depthserve.gateway.dispatch.retry_budget import RetryBudget


def test_floor_then_share() -> None:
    budget = RetryBudget(budget_percent=20, min_retry_concurrency=2)
    budget.active_requests = 5
    assert budget.try_acquire() and budget.try_acquire()
    assert not budget.try_acquire() and budget.refused == 1
    budget.active_requests = 50  # 20% of 50 = 10
    assert all(budget.try_acquire() for _ in range(8))
    assert not budget.try_acquire()
    budget.release()
    assert budget.try_acquire() and budget.retries == 11


async def test_a_waiting_retry_gets_the_next_free_slot_or_gives_up_at_its_deadline() -> None:
    budget = RetryBudget(budget_percent=0, min_retry_concurrency=1)
    assert await budget.acquire(0.0)
    waiting = asyncio.ensure_future(budget.acquire(5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    budget.release()  # handed over directly
    assert await waiting and budget.active_retries == 1
    assert not await budget.acquire(0.01)  # nobody releases: gives up at its deadline
    assert budget.refused == 1 and not budget._waiters
    budget.release()
    assert budget.active_retries == 0


async def test_no_waiting_when_nothing_could_release_a_slot() -> None:
    budget = RetryBudget(budget_percent=20, min_retry_concurrency=0)
    budget.active_requests = 2  # 20% of 2 rounds down to 0 and no retry is running
    assert not await budget.acquire(30.0) and budget.refused == 1
