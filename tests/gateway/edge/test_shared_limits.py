"""Limits shared by a gateway's processes: two controllers on one shared block behave as one gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from depthserve.gateway.edge.rate_limit import Limit
from depthserve.gateway.edge.shared_limits import SharedAdmission, SharedRateLimiter
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.processes.shared import SharedState


@pytest.fixture
def block() -> Iterator[Path]:
    directory = SharedState.create(2)
    yield directory
    SharedState.remove(directory)


def test_two_limiters_spend_one_bucket(block: Path) -> None:
    now = [0.0]
    a, b = (SharedRateLimiter(SharedState(block), Limit(1.0, 3), clock=lambda: now[0]) for _ in range(2))
    for limiter in (a, b, a):
        limiter.check("alice")
    with pytest.raises(GatewayError) as refused:
        b.check("alice")
    assert refused.value.status == 429 and refused.value.retry_after is not None
    a.check("bob")  # another identity has its own bucket
    now[0] = 1.0
    b.check("alice")  # a second later one token is back, for either process
    assert (a.limited, b.limited) == (0, 1)


def test_a_slot_freed_in_one_process_goes_to_a_waiter_in_the_other(block: Path) -> None:
    async def run() -> None:
        # One slot and one queue place for the whole gateway, over two processes.
        first, second = (SharedAdmission(SharedState(block), i, 2, 1, 1) for i in range(2))
        deadline = asyncio.get_running_loop().time() + 10
        holder = first.admit("m", deadline)
        await holder.__aenter__()
        assert first.in_flight == 1 and first.gateway_in_flight == 1
        queued = second.admit("m", deadline, client="b")  # kept: dropping it would release its slot
        waiting = asyncio.ensure_future(queued.__aenter__())
        await asyncio.sleep(0.05)
        assert not waiting.done() and second.queued["normal"] == 1  # the slot is held in the other process
        with pytest.raises(GatewayError) as full:  # the queue place is taken in the other process
            async with first.admit("m", deadline, client="c"):
                pass
        assert full.value.reason == "queue_full"
        await holder.__aexit__(None, None, None)
        async with asyncio.timeout(2):  # handed over within a poll
            await waiting
        assert (first.in_flight, second.in_flight, second.gateway_in_flight) == (0, 1, 1)
        await queued.__aexit__(None, None, None)
        assert second.gateway_in_flight == 0

    asyncio.run(run())
