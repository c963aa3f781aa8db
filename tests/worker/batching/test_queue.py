"""The batch queue's order: normal requests ahead of low-priority ones queued within the delay, never starving them."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from depthserve.protocol.depth_api import DepthInputs
from depthserve.worker.batching.key import batch_key
from depthserve.worker.batching.queue import BatchQueue, Waiting
from depthserve.worker.device_queue import QueueFull
from depthserve.worker.runners.base import Prepared


def waiting(tag: int, arrived: float, height: int = 48) -> Waiting:
    prepared = Prepared(DepthInputs(image=b""), height, 64, outputs={"tag": np.array(tag)})
    return Waiting(prepared, batch_key(prepared), arrived, None, asyncio.get_running_loop().create_future())


def tags(items: list[Waiting]) -> list[int]:
    return [int(item.prepared.outputs["tag"]) for item in items]


async def test_take_gives_normal_requests_first_then_fills_with_low_ones_in_arrival_order() -> None:
    queue = BatchQueue(16, low_delay_s=1.0)
    for tag, arrived, low in ((1, 0.0, True), (2, 0.1, True), (3, 0.2, False), (4, 0.3, True), (5, 0.4, False)):
        queue.add(waiting(tag, arrived), low)
    key = batch_key(waiting(0, 0.0).prepared)
    assert queue.rank(key) == pytest.approx(0.2)  # the oldest normal request, not the older low ones
    assert tags(queue.take(key, 3)) == [1, 3, 5]  # the two normal ones, the oldest low one; kept in arrival order
    assert tags(list(queue.items())) == [2, 4] and queue.waiting == 2
    assert tags(queue.take(key, 5)) == [2, 4] and not queue


async def test_a_low_request_ranks_ahead_of_normal_ones_arriving_after_its_delay() -> None:
    queue = BatchQueue(16, low_delay_s=0.5)
    old_low = waiting(1, 0.0)
    queue.add(old_low, low=True)
    queue.add(waiting(2, 0.4), low=False)  # within the delay: goes first
    queue.add(waiting(3, 0.6), low=False)  # after it: the low one goes first
    key = old_low.key
    assert tags(queue.take(key, 1)) == [2]
    assert tags(queue.take(key, 1)) == [1]
    assert tags(queue.take(key, 1)) == [3]


async def test_groups_rank_by_their_best_request_and_zero_delay_is_fifo() -> None:
    queue = BatchQueue(16, low_delay_s=2.0)
    frame, image = waiting(1, 0.0, height=96), waiting(2, 1.0)
    queue.add(frame, low=True)
    queue.add(image, low=False)
    assert queue.rank(image.key) < queue.rank(frame.key)  # the image's group runs first
    fifo = BatchQueue(16)
    fifo.add(waiting(1, 0.0, height=96), low=True)
    fifo.add(waiting(2, 1.0), low=False)
    assert fifo.rank(frame.key) < fifo.rank(image.key)


async def test_discard_and_the_bound_hold_with_priorities() -> None:
    queue = BatchQueue(2, low_delay_s=1.0)
    first, second = waiting(1, 0.0), waiting(2, 0.1)
    queue.add(first, low=True)
    queue.add(second)
    with pytest.raises(QueueFull):
        queue.add(waiting(3, 0.2), low=True)
    queue.discard(second)
    assert queue.waiting == 1 and queue.rank(first.key) == pytest.approx(1.0)
    first.future.cancel()  # its caller gave up just as it was taken: never handed to a batch
    assert queue.take(first.key, 1) == [] and not queue


async def test_a_high_request_goes_before_every_other_even_with_no_low_delay() -> None:
    for delay in (0.0, 1.0):
        queue = BatchQueue(16, low_delay_s=delay)
        normal, low, high = waiting(1, 0.0), waiting(2, 0.1), waiting(3, 5.0)
        queue.add(normal)
        queue.add(low, low=True)
        queue.add(high, high=True)  # the gateway's express slot: arrived last, runs next
        queue.add(waiting(4, 6.0), high=True)
        key = normal.key
        assert tags(queue.take(key, 1)) == [3]
        assert tags(queue.take(key, 1)) == [4]  # among high requests, arrival order
        assert tags(queue.take(key, 2)) == [1, 2]
