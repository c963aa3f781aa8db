"""The overlap pipeline on a pretend device: the next batch is copied in and launched while one runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from depthserve.testing.fake_device import FakeDevice, labelled_batch
from depthserve.worker.overlap import OverlapPipeline


@pytest.fixture
async def device() -> AsyncIterator[FakeDevice]:
    fake = FakeDevice()
    yield fake
    fake.close()


async def wait_for(device: FakeDevice, event: str) -> None:
    assert await asyncio.to_thread(device.wait_for, event), f"{event!r} never happened; log {device.log}"


def labels(outputs: list[dict[str, object]]) -> list[str]:
    return [str(item["label"]) for item in outputs]


async def test_the_next_batch_is_staged_and_launched_while_one_runs(device: FakeDevice) -> None:
    pipeline = OverlapPipeline(device, depth=2)
    device.hold("A")
    first = asyncio.create_task(pipeline.run(labelled_batch("A", 3)))
    await wait_for(device, "launched A")
    second = asyncio.create_task(pipeline.run(labelled_batch("B", 2)))
    await wait_for(device, "launched B")  # queued behind A on the device: no gap for Python when A ends
    assert "ran A" not in device.log
    device.release("A")
    assert labels(await first) == ["A/0", "A/1", "A/2"]
    assert labels(await second) == ["B/0", "B/1"]
    assert device.log.index("ran A") < device.log.index("ran B")
    assert device.most_launching == 1  # one thread launches, so launches never interleave


async def test_at_most_depth_batches_are_in_flight(device: FakeDevice) -> None:
    pipeline = OverlapPipeline(device, depth=2)
    device.hold("A")
    tasks = [asyncio.create_task(pipeline.run(labelled_batch(label, 1))) for label in "ABC"]
    await wait_for(device, "launched B")
    await asyncio.sleep(0.1)  # room for a third to sneak in, were the bound broken
    assert "staged C" not in device.log and pipeline.in_flight == 2
    device.release("A")
    assert [labels(result) for result in await asyncio.gather(*tasks)] == [["A/0"], ["B/0"], ["C/0"]]
    assert device.most_in_flight == 2 and pipeline.in_flight == 0
    # C took the place of a batch that had left: A's or B's, whichever stage-out thread finished first (B's
    # can, when A's thread is descheduled between its wait and its log line on a busy machine)
    first_out = min(device.log.index("out A"), device.log.index("out B"))
    assert device.log.index("staged C") > first_out


async def test_depth_one_runs_the_stages_of_each_batch_in_turn(device: FakeDevice) -> None:
    pipeline = OverlapPipeline(device, depth=1)
    device.hold("A")
    tasks = [asyncio.create_task(pipeline.run(labelled_batch(label, 1))) for label in "AB"]
    await wait_for(device, "launched A")
    await asyncio.sleep(0.1)
    assert "staged B" not in device.log
    device.release("A")
    await asyncio.gather(*tasks)
    stages = ("staged", "launched", "ran", "out")
    assert device.log == [f"{stage} {label}" for label in "AB" for stage in stages]


@pytest.mark.parametrize("stage", ["stage_in", "compute"])
async def test_a_failing_stage_fails_its_batch_alone(device: FakeDevice, stage: str) -> None:
    pipeline = OverlapPipeline(device, depth=2)
    device.failing["B"] = stage
    results = await asyncio.gather(*(pipeline.run(labelled_batch(label, 2)) for label in "ABC"), return_exceptions=True)
    assert labels(results[0]) == ["A/0", "A/1"] and labels(results[2]) == ["C/0", "C/1"]
    assert isinstance(results[1], RuntimeError) and f"{stage} failed for B" in str(results[1])
    assert pipeline.in_flight == 0 and device.in_flight == 0


def test_a_pipeline_needs_room_for_one_batch(device: FakeDevice) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OverlapPipeline(device, depth=0)
