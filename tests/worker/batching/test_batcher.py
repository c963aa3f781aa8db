"""The batcher: same-key batches, exact outputs, deadlines in the queue, lone failures and no idle waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from depthserve.model import ModelInputError, predict
from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.testing.fakes import FakeClock
from depthserve.worker.batching.batcher import Batcher
from depthserve.worker.batching.key import batch_key
from depthserve.worker.batching.policy import AdaptivePolicy, BatchPolicy, FixedPolicy
from depthserve.worker.batching.stats import BatchStats
from depthserve.worker.device_queue import DeviceQueue, QueueFull
from depthserve.worker.runners.base import Outputs, Prepared

HOLD = FixedPolicy(max_queue_delay_s=3600.0)  # batches close only when full: grouping does not depend on timing


def item(tag: int, height: int = 48, width: int = 64, level: int = 9) -> Prepared:
    """A prepared request whose outputs carry its tag, so answers can be matched to requests."""
    inputs = DepthInputs(image=b"", resolution_level=level)
    return Prepared(inputs, height, width, outputs={"tag": np.array(tag)})


class GatedRunner:
    """Records every batch by tag and finishes each one only when the test opens the gate."""

    platform = "test"
    max_batch = 8
    cheap_prepare = True

    def __init__(self, bad: frozenset[int] = frozenset(), gated: bool = True) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.bad = bad

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        tags = [int(p.outputs["tag"]) for p in batch]
        self.batches.append(tags)
        await self.gate.wait()
        if self.bad.intersection(tags):  # like predict_batch: one invalid item fails the whole call
            raise ModelInputError(f"item {sorted(self.bad.intersection(tags))[0]} is invalid")
        return [p.outputs for p in batch]


def make(
    runner: Any,
    policy: BatchPolicy = HOLD,
    max_batch: int = 8,
    clock: FakeClock | None = None,
    **kw: Any,
) -> Batcher:
    return Batcher(
        runner,
        DeviceQueue(64),
        policy,
        max_batch=max_batch,
        max_batch_pixels=kw.pop("max_batch_pixels", 10**9),
        queue_limit=kw.pop("queue_limit", 64),
        clock=clock or FakeClock(),
        **kw,
    )


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_batched_outputs_equal_unbatched_outputs(tiny_model: Any) -> None:
    from depthserve.worker.runners.torch_runner import TorchRunner

    runner = TorchRunner(WorkerSettings(model="tiny", threads=1, max_batch_size=4))
    runner.load()
    rng = np.random.default_rng(7)
    k = np.array([[60.0, 0, 32.0], [0, 60.0, 24.0], [0, 0, 1]], dtype=np.float32)
    requests = []
    for index in range(4):
        image = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        depth = (rng.random((48, 64)) * 3 + 0.5).astype(np.float32)
        depth[rng.random((48, 64)) < 0.1 * (index + 1)] = 0.0  # a different hole pattern per item
        depth[: 8 * index] = 0.0
        inputs = DepthInputs(image=image, depth=None if index == 3 else depth, intrinsics=k if index % 2 else None)
        requests.append(runner.prepare(inputs))
    batcher = make(runner, max_batch=4)
    outputs = await asyncio.gather(*(batcher.run(p) for p in requests))
    assert batcher.last_batch_size == 4 and batcher.stats.curve(batch_key(requests[0])) is not None
    for prepared, got in zip(requests, outputs, strict=True):
        alone = predict(tiny_model, prepared.image, prepared.depth, prepared.intrinsics)  # type: ignore[arg-type]
        assert got.keys() == alone.keys()
        for name in alone:
            np.testing.assert_allclose(got[name], alone[name], atol=1e-5, rtol=0)


async def test_requests_are_grouped_by_grid_and_size() -> None:
    runner = GatedRunner(gated=False)
    batcher = make(runner, max_batch=2)
    small = [item(1), item(3), item(5)]
    tall = [item(2, 64, 48), item(4, 64, 48)]
    assert batch_key(small[0]).grid != batch_key(tall[0]).grid
    assert batch_key(item(0, 48, 64, level=0)) != batch_key(small[0])  # another token budget, another grid
    assert batch_key(item(0, 480, 640)) != batch_key(small[0])  # same grid, but images are stacked as they are
    calls = [batcher.run(p) for p in (small[0], tall[0], small[1], tall[1], small[2])]
    pending = [asyncio.ensure_future(c) for c in calls]
    await settle()
    assert runner.batches == [[1, 3], [2, 4]]  # never mixed; the odd one out waits for a partner
    assert batcher.waiting == 1
    pending[-1].cancel()
    results = await asyncio.gather(*pending[:-1])
    assert [int(r["tag"]) for r in results] == [1, 2, 3, 4]
    batcher.close()


async def test_pixel_budget_splits_large_images_into_smaller_batches() -> None:
    runner = GatedRunner(gated=False)
    batcher = make(runner, max_batch=8, max_batch_pixels=2 * 480 * 640)
    await asyncio.gather(*(batcher.run(item(n, 480, 640)) for n in range(4)))
    assert runner.batches == [[0, 1], [2, 3]]


async def test_deadline_passing_in_the_queue_fails_the_request_uncomputed() -> None:
    clock = FakeClock()
    runner = GatedRunner()
    computed: list[int] = []
    batcher = make(runner, FixedPolicy(0.0), clock=clock, on_computed=computed.append)
    first = asyncio.ensure_future(batcher.run(item(1)))
    await settle()
    late = asyncio.ensure_future(batcher.run(item(2), deadline=clock() + 1.0))
    await settle()
    assert batcher.waiting == 1
    clock.advance(2.0)
    runner.gate.set()
    await first
    with pytest.raises(TimeoutError, match="not computed"):
        await late
    assert runner.batches == [[1]] and computed == [1] and batcher.waiting == 0
    with pytest.raises(TimeoutError):
        await batcher.run(item(3), deadline=clock() - 0.1)  # already late on arrival: never queued
    batcher.close()


async def test_an_invalid_request_fails_alone_not_its_batch() -> None:
    runner = GatedRunner(bad=frozenset({2}), gated=False)
    batcher = make(runner, max_batch=3)
    results = await asyncio.gather(*(batcher.run(item(n)) for n in (1, 2, 3)), return_exceptions=True)
    assert int(results[0]["tag"]) == 1 and int(results[2]["tag"]) == 3  # type: ignore[index]
    assert isinstance(results[1], ModelInputError)
    assert runner.batches == [[1, 2, 3], [1], [2], [3]]  # the whole batch, then one by one


async def test_queue_is_bounded_and_refuses_at_once() -> None:
    runner = GatedRunner()
    batcher = make(runner, FixedPolicy(0.0), max_batch=1, queue_limit=2)
    running = [asyncio.ensure_future(batcher.run(item(n))) for n in range(3)]
    await settle()
    assert (batcher.running, batcher.waiting) == (1, 2)
    with pytest.raises(QueueFull):
        await batcher.run(item(9))
    runner.gate.set()
    await asyncio.gather(*running)
    assert runner.batches == [[0], [1], [2]]


async def test_cancelled_caller_leaves_the_queue() -> None:
    runner = GatedRunner()
    batcher = make(runner, FixedPolicy(0.0))
    first = asyncio.ensure_future(batcher.run(item(1)))
    await settle()
    gone = asyncio.ensure_future(batcher.run(item(2)))
    await settle()
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert batcher.waiting == 0
    runner.gate.set()
    await first
    assert runner.batches == [[1]]


async def test_adaptive_runs_a_lone_request_at_once_at_low_load() -> None:
    clock = FakeClock()
    runner = GatedRunner()
    stats = BatchStats()
    key = batch_key(item(0))
    for n, seconds in ((1, 0.022), (8, 0.036), (4, 0.028)):
        stats.measured(key, n, seconds)
    for _ in range(5):  # one request a second: far below what batching needs
        stats.arrived(key, clock())
        clock.advance(1.0)
    batcher = make(runner, AdaptivePolicy(target_latency_s=0.1), clock=clock, stats=stats)
    task = asyncio.ensure_future(batcher.run(item(1)))
    await settle()
    assert runner.batches == [[1]] and batcher.waiting == 0  # started without the clock moving
    runner.gate.set()
    await task
    batcher.close()


async def test_adaptive_holds_a_partial_batch_when_requests_arrive_fast() -> None:
    clock = FakeClock()
    runner = GatedRunner(gated=False)
    stats = BatchStats()
    key = batch_key(item(0))
    for n, seconds in ((1, 0.022), (8, 0.036)):
        stats.measured(key, n, seconds)
    for _ in range(20):  # one request a millisecond
        stats.arrived(key, clock())
        clock.advance(0.001)
    batcher = make(runner, AdaptivePolicy(target_latency_s=0.1), clock=clock, stats=stats)
    first = asyncio.ensure_future(batcher.run(item(1)))
    await settle()
    assert runner.batches == [] and batcher.waiting == 1  # held: more are expected within the fixed cost
    clock.advance(0.001)
    second = asyncio.ensure_future(batcher.run(item(2)))
    await settle()
    assert runner.batches == []
    clock.advance(0.05)  # past any hold the target allows
    batcher.pump()
    await asyncio.gather(first, second)
    assert runner.batches == [[1, 2]]
    batcher.close()


async def test_an_image_queued_after_video_frames_runs_before_them() -> None:
    runner = GatedRunner()
    batcher = make(runner, FixedPolicy(0.0), max_batch=2, low_priority_delay_s=1.0)
    running = asyncio.ensure_future(batcher.run(item(0)))  # holds the device
    await settle()
    frames = [asyncio.ensure_future(batcher.run(item(n, 96, 128), low=True)) for n in (1, 2, 3)]
    await settle()
    image = asyncio.ensure_future(batcher.run(item(9)))
    await settle()
    runner.gate.set()
    await asyncio.gather(running, image, *frames)
    assert runner.batches == [[0], [9], [1, 2], [3]]  # frames keep batching among themselves, after the image


async def test_without_batching_requests_of_any_size_run_one_at_a_time_oldest_first() -> None:
    runner = GatedRunner()
    batcher = make(runner, max_batch=1)
    sizes = [(48, 64), (64, 48), (48, 64), (96, 128)]
    pending = [asyncio.ensure_future(batcher.run(item(tag, *size))) for tag, size in enumerate(sizes)]
    await settle()
    assert runner.batches == [[0]] and batcher.waiting == 3  # the device runs one; the rest wait their turn
    runner.gate.set()
    results = await asyncio.gather(*pending)
    assert runner.batches == [[0], [1], [2], [3]]  # arrival order across sizes, never grouped
    assert [int(r["tag"]) for r in results] == [0, 1, 2, 3] and batcher.last_batch_size == 1
    batcher.close()


async def test_without_batching_an_image_still_runs_before_video_frames_queued_earlier() -> None:
    runner = GatedRunner()
    batcher = make(runner, max_batch=1, low_priority_delay_s=1.0)
    running = asyncio.ensure_future(batcher.run(item(0)))  # holds the device
    await settle()
    frames = [asyncio.ensure_future(batcher.run(item(n, 96, 128), low=True)) for n in (1, 2)]
    await settle()
    image = asyncio.ensure_future(batcher.run(item(9)))
    await settle()
    runner.gate.set()
    await asyncio.gather(running, image, *frames)
    assert runner.batches == [[0], [9], [1], [2]]  # one at a time, the image first (the fast path keeps ranks)
    batcher.close()


class SteppedRunner:
    """Finishes each batch only when the test releases that batch, so a staged batch can wait behind another."""

    platform = "test"
    max_batch = 8
    cheap_prepare = True

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        self.batches.append([int(p.outputs["tag"]) for p in batch])
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [p.outputs for p in batch]


def pipelined(runner: SteppedRunner, clock: FakeClock, max_batch: int = 8) -> Batcher:
    """A batcher in front of a GPU's pipeline: one batch computes, one more may be staged behind it."""
    stats = BatchStats()
    key = batch_key(item(0))
    for n, seconds in ((1, 0.04), (8, 0.25)):  # t(n) = 10 ms + 30 ms an item
        stats.measured(key, n, seconds)
    return Batcher(runner, DeviceQueue(64, slots=2), FixedPolicy(0.0), max_batch=max_batch, max_batch_pixels=10**9,
                   queue_limit=64, clock=clock, stats=stats, computing=1)  # fmt: skip


async def test_a_staged_batch_stays_open_for_arrivals_until_the_device_is_about_to_free() -> None:
    clock, runner = FakeClock(), SteppedRunner()
    batcher = pipelined(runner, clock)
    first = asyncio.ensure_future(batcher.run(item(0)))  # computes at once, predicted 40 ms
    await settle()
    clock.advance(0.01)
    waiting = [asyncio.ensure_future(batcher.run(item(n))) for n in (1, 2)]
    await settle()
    assert runner.batches == [[0]] and batcher.waiting == 2  # not staged at the first arrival: more may come
    clock.advance(0.015)
    waiting.append(asyncio.ensure_future(batcher.run(item(3))))
    await settle()
    assert runner.batches == [[0]]
    clock.advance(0.01)  # 35 ms in: a fifth of the 40 ms predicted is left, time to stage the next batch
    batcher.pump()
    await settle()
    assert runner.batches == [[0], [1, 2, 3]] and batcher.waiting == 0
    clock.advance(0.015)
    runner.gates[0].set()
    await first
    clock.advance(0.1)
    runner.gates[1].set()
    await asyncio.gather(*waiting)
    assert batcher.batch_seconds.sum == pytest.approx(0.05 + 0.1)  # the staged batch timed from the first's end
    batcher.close()


async def test_a_staged_batch_starts_at_once_when_full_or_when_the_device_frees_early() -> None:
    clock, runner = FakeClock(), SteppedRunner()
    batcher = pipelined(runner, clock, max_batch=2)
    first = asyncio.ensure_future(batcher.run(item(0)))
    await settle()
    full = [asyncio.ensure_future(batcher.run(item(n))) for n in (1, 2)]
    await settle()
    assert runner.batches == [[0], [1, 2]]  # full: nothing more could join it
    runner.gates[0].set()
    await first
    lone = asyncio.ensure_future(batcher.run(item(3)))
    await settle()
    assert runner.batches == [[0], [1, 2]]  # [1, 2] computes; [3] may wait for company
    runner.gates[1].set()  # long before the predicted 70 ms
    await asyncio.gather(*full)
    await settle()
    assert runner.batches == [[0], [1, 2], [3]]  # the device is free: no waiting on a prediction
    runner.gates[2].set()
    await lone
    batcher.close()
