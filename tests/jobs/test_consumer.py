"""The pull loop with the in-process broker and memory store: results, retries, poison jobs, capacity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from depthserve.jobs.broker import Delivery
from depthserve.jobs.consumer import JobConsumer
from depthserve.jobs.in_process import InProcessBroker
from depthserve.jobs.memory_store import MemoryJobStore
from depthserve.jobs.model import Job, JobState, new_job_id
from depthserve.testing.jobs import ScriptedExecutor


class Rig:
    """A broker, a store, an executor and a running consumer."""

    def __init__(
        self,
        executor: ScriptedExecutor,
        capacity: int = 2,
        max_attempts: int = 3,
        stale_after_s: float = 5,
        touch_every_s: float = 1,
        broker: InProcessBroker | None = None,
    ) -> None:
        self.broker = broker or InProcessBroker()
        self.store = MemoryJobStore(ttl_s=60)
        self.executor = executor
        self.consumer = JobConsumer(
            self.broker,
            self.store,
            executor,
            capacity,
            max_attempts=max_attempts,
            job_timeout_s=5,
            stale_after_s=stale_after_s,
            touch_every_s=touch_every_s,
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

    async def settled(self) -> None:
        """Wait until no delivery is running or queued (a given-back one comes round again first)."""
        for _ in range(300):
            if self.consumer.in_flight == 0 and await self.broker.depth() == 0:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"deliveries still pending: {self.consumer.counts}")


Rigs = list[tuple[Rig, asyncio.Task[None]]]


@pytest.fixture
async def rig_factory() -> AsyncIterator[Rigs]:
    """Started rigs; each consumer is stopped and its loop ended after the test."""
    rigs: Rigs = []
    yield rigs
    for rig, task in rigs:
        await rig.consumer.stop(1.0)
        async with asyncio.timeout(2.0):  # the loop ends by itself once stopped: nothing leaks
            await task


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
    rig = Rig(ScriptedExecutor(), stale_after_s=0)  # the first attempt counts as dead: the duplicate computes too
    job_id = await rig.submit(b"twice")
    await rig.broker.publish(job_id)  # at-least-once: the broker hands the same job out again
    await start(rig_factory, rig)
    await rig.final(job_id)
    await rig.settled()
    job = await rig.store.get(job_id)
    assert (job.state, job.stores, job.duplicates) == (JobState.SUCCEEDED, 1, 1)
    assert rig.consumer.counts.duplicates == 1 and rig.executor.calls == [b"twice", b"twice"]


async def test_a_duplicate_delivery_while_the_job_runs_is_given_back_not_counted(rig_factory: Rigs) -> None:
    gate = asyncio.Event()

    class Gated(ScriptedExecutor):
        async def __call__(self, payload: bytes, timeout_s: float) -> tuple[bytes, str]:
            self.calls.append(payload)
            await gate.wait()
            return b"ok", "text/plain"

    rig = Rig(Gated(), max_attempts=1)
    job_id = await rig.submit(b"slow")
    await rig.broker.publish(job_id)  # redelivered while its only allowed attempt still computes
    await start(rig_factory, rig)
    while rig.consumer.counts.busy == 0:
        await asyncio.sleep(0.01)
    gate.set()
    assert (await rig.final(job_id)).state == JobState.SUCCEEDED  # not failed for "too many attempts"
    await rig.settled()
    job = await rig.store.get(job_id)
    assert (job.attempts, job.stores) == (1, 1) and rig.executor.calls == [b"slow"]
    assert rig.consumer.counts.skipped == 1  # the given-back message came round again and was dropped


async def test_heartbeats_keep_a_job_running_past_the_stale_window_busy(rig_factory: Rigs) -> None:
    gate = asyncio.Event()

    class Gated(ScriptedExecutor):
        async def __call__(self, payload: bytes, timeout_s: float) -> tuple[bytes, str]:
            self.calls.append(payload)
            await gate.wait()
            return b"ok", "text/plain"

    rig = Rig(Gated(), stale_after_s=1.0, touch_every_s=0.1)
    job_id = await rig.submit(b"long")
    await rig.broker.publish(job_id)  # redelivered again and again while the attempt outlives the window
    await start(rig_factory, rig)
    for _ in range(200):  # each give-back waits BACKOFF_S: four of them are well past the 1 s window
        if rig.consumer.counts.busy >= 4 or len(rig.executor.calls) > 1:
            break
        await asyncio.sleep(0.05)
    assert rig.executor.calls == [b"long"]  # never started twice while its attempt kept beating
    gate.set()
    assert (await rig.final(job_id)).state == JobState.SUCCEEDED
    await rig.settled()
    job = await rig.store.get(job_id)
    assert (job.attempts, job.stores, job.duplicates) == (1, 1, 0) and rig.executor.calls == [b"long"]


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


async def test_a_fetch_bug_does_not_end_the_loop(rig_factory: Rigs) -> None:
    class FailsOnce(InProcessBroker):
        failed = False

        async def fetch(self, max_count: int, wait_s: float) -> list[Delivery]:
            if not self.failed:
                self.failed = True
                raise RuntimeError("client library bug")
            return await super().fetch(max_count, wait_s)

    rig = await start(rig_factory, Rig(ScriptedExecutor(), broker=FailsOnce()))
    assert (await rig.final(await rig.submit(b"after-the-bug"))).state == JobState.SUCCEEDED


async def test_stop_starts_nothing_fetched_meanwhile(rig_factory: Rigs) -> None:
    rig = await start(rig_factory, Rig(ScriptedExecutor()))
    await asyncio.sleep(0)  # the loop waits in fetch
    job_id = await rig.submit(b"late")  # arrives while stop() begins
    await rig.consumer.stop(1.0)
    calls, in_flight = list(rig.executor.calls), rig.consumer.in_flight
    async with asyncio.timeout(2.0):
        await rig_factory[-1][1]
    for _ in range(5):
        await asyncio.sleep(0)
    assert in_flight == 0 and rig.consumer.in_flight == 0
    assert rig.executor.calls == calls  # nothing started after stop() returned
    state = (await rig.store.get(job_id)).state
    assert state == JobState.SUCCEEDED or (state == JobState.QUEUED and await rig.broker.depth() == 1)


async def test_a_job_cut_off_by_stop_is_queued_again(rig_factory: Rigs) -> None:
    class Endless(ScriptedExecutor):
        async def __call__(self, payload: bytes, timeout_s: float) -> tuple[bytes, str]:
            self.calls.append(payload)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    rig = await start(rig_factory, Rig(Endless()))
    job_id = await rig.submit(b"endless")
    while not rig.executor.calls:
        await asyncio.sleep(0.01)
    await rig.consumer.stop(0.05)  # past its grace the attempt is cut off
    job = await rig.store.get(job_id)
    assert (job.state, job.attempts) == (JobState.QUEUED, 1)  # a redelivery runs it at once, not after the timeout
