"""The pull loop with the in-process broker and memory store: results, retries, poison jobs, capacity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from depthserve.jobs.consumer import JobConsumer
from depthserve.jobs.in_process import InProcessBroker
from depthserve.jobs.model import Job, JobState, new_job_id
from depthserve.jobs.store import MemoryJobStore
from depthserve.testing.jobs import ScriptedExecutor


class Rig:
    """A broker, a store, an executor and a running consumer."""

    def __init__(self, executor: ScriptedExecutor, capacity: int = 2, max_attempts: int = 3) -> None:
        self.broker = InProcessBroker()
        self.store = MemoryJobStore(ttl_s=60)
        self.executor = executor
        self.consumer = JobConsumer(
            self.broker, self.store, executor, capacity, max_attempts=max_attempts, job_timeout_s=5, touch_every_s=1
        )

    async def submit(self, payload: bytes) -> str:
        job, _ = await self.store.create(Job(id=new_job_id(), model="m", created_at=time.time()), payload)
        await self.broker.publish(job.id)
        return job.id

    async def final(self, job_id: str) -> Job:
        for _ in range(200):
            job = await self.store.get(job_id)
            if job.final:
                return job
            await asyncio.sleep(0.01)
        raise AssertionError(f"job {job_id} never ended: {job}")


Rigs = list[tuple[Rig, asyncio.Task[None]]]


@pytest.fixture
async def rig_factory() -> AsyncIterator[Rigs]:
    """Started rigs; each consumer is stopped and its loop ended after the test."""
    rigs: Rigs = []
    yield rigs
    for rig, task in rigs:
        await rig.consumer.stop(1.0)
        await asyncio.wait_for(task, 2.0)  # the loop ends by itself once stopped: nothing leaks


async def start(rigs: Rigs, rig: Rig) -> Rig:
    rigs.append((rig, asyncio.get_running_loop().create_task(rig.consumer.run())))
    return rig


async def test_jobs_end_succeeded_with_their_own_result(rig_factory: Rigs) -> None:
    rig = await start(rig_factory, Rig(ScriptedExecutor()))
    ids = [await rig.submit(f"image-{i}".encode()) for i in range(20)]
    for i, job_id in enumerate(ids):
        assert (await rig.final(job_id)).state == JobState.SUCCEEDED
        assert await rig.store.result(job_id) == (f"result:image-{i}".encode(), "application/octet-stream")
    assert rig.consumer.counts.succeeded == 20


async def test_a_job_that_keeps_failing_fails_after_n_attempts_into_the_dlq(rig_factory: Rigs) -> None:
    rig = await start(rig_factory, Rig(ScriptedExecutor({b"poison": ("model crashed", False)}), max_attempts=3))
    job_id = await rig.submit(b"poison")
    job = await rig.final(job_id)
    assert (job.state, job.attempts, job.error) == (JobState.FAILED, 3, "model crashed")
    assert rig.executor.calls.count(b"poison") == 3
    assert await rig.broker.dead_letters() == [job_id]


async def test_bad_input_fails_at_once_without_retries(rig_factory: Rigs) -> None:
    rig = await start(rig_factory, Rig(ScriptedExecutor({b"not-an-image": ("cannot decode image", True)})))
    job = await rig.final(await rig.submit(b"not-an-image"))
    assert (job.state, job.attempts, job.error) == (JobState.FAILED, 1, "cannot decode image")
    assert await rig.broker.dead_letters() == []


async def test_a_duplicate_delivery_stores_the_result_once(rig_factory: Rigs) -> None:
    rig = Rig(ScriptedExecutor())
    job_id = await rig.submit(b"twice")
    await rig.broker.publish(job_id)  # at-least-once: the broker hands the same job out again
    await start(rig_factory, rig)
    job = await rig.final(job_id)
    await asyncio.sleep(0.05)
    job = await rig.store.get(job_id)
    assert (job.state, job.stores) == (JobState.SUCCEEDED, 1)


async def test_a_cancelled_job_is_never_run(rig_factory: Rigs) -> None:
    rig = Rig(ScriptedExecutor())
    job_id = await rig.submit(b"cancel-me")
    assert (await rig.store.cancel(job_id)).state == JobState.CANCELLED
    await start(rig_factory, rig)
    keep = await rig.submit(b"after")
    await rig.final(keep)
    assert rig.executor.calls == [b"after"]
    assert (await rig.store.get(job_id)).state == JobState.CANCELLED


async def test_it_takes_no_more_jobs_than_its_free_slots(rig_factory: Rigs) -> None:
    gate = asyncio.Event()
    running: list[int] = []
    peak = 0

    class Slow(ScriptedExecutor):
        async def __call__(self, payload: bytes, timeout_s: float) -> tuple[bytes, str]:
            nonlocal peak
            running.append(1)
            peak = max(peak, len(running))
            await gate.wait()
            running.pop()
            return b"ok", "text/plain"

    rig = await start(rig_factory, Rig(Slow(), capacity=2))
    ids = [await rig.submit(b"x%d" % i) for i in range(6)]
    await asyncio.sleep(0.2)
    assert rig.consumer.in_flight == 2 and await rig.broker.depth() == 4  # the rest wait in the queue
    gate.set()
    for job_id in ids:
        assert (await rig.final(job_id)).state == JobState.SUCCEEDED
    assert peak == 2
