"""Job stores (in memory and real Redis): states, exactly-once results, idempotency, cancel, expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from tests.conftest import require_service

from depthserve.jobs.errors import JobConflict, JobNotFound
from depthserve.jobs.memory_store import MemoryJobStore
from depthserve.jobs.model import Job, JobState, new_job_id
from depthserve.jobs.redis_store import RedisJobStore
from depthserve.jobs.store import BUSY, GAVE_UP, RUN, SKIP, JobStore
from depthserve.testing.jobs import REDIS_URL, clean_up, unique_namespace


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[JobStore]:
    """Each test runs against both stores; the Redis one under a namespace of its own."""
    if request.param == "memory":
        yield MemoryJobStore(ttl_s=60)
        return
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("store")
    redis_store = RedisJobStore(REDIS_URL, namespace, ttl_s=60)
    try:
        yield redis_store
    finally:
        await redis_store.close()
        await clean_up(REDIS_URL, namespace)


FRESH = 30.0  # stale_after_s: a heartbeat younger than this means the running attempt is alive
DEAD = 0.0  # every heartbeat is already stale: the running attempt counts as dead


def new_job(owner: str = "") -> Job:
    return Job(id=new_job_id(), model="lingbot-depth", created_at=time.time(), owner=owner)


async def test_a_job_runs_once_and_its_result_is_stored_once(store: JobStore) -> None:
    job, created = await store.create(new_job(), b"payload")
    assert created and (await store.get(job.id)).state == JobState.QUEUED
    assert await store.payload(job.id) == b"payload"
    assert (await store.start(job.id, 3, FRESH)).action == RUN
    assert (await store.get(job.id)).state == JobState.RUNNING
    assert await store.succeed(job.id, b"result", "application/x-npy") is True
    assert await store.succeed(job.id, b"again", "application/x-npy") is False  # a second delivery's result
    done = await store.get(job.id)
    assert (done.state, done.attempts, done.stores, done.duplicates) == (JobState.SUCCEEDED, 1, 1, 1)
    assert await store.result(job.id) == (b"result", "application/x-npy")
    assert (await store.start(job.id, 3, FRESH)).action == SKIP  # a redelivery after success does nothing


async def test_idempotency_key_gives_the_existing_job(store: JobStore) -> None:
    first, created = await store.create(new_job(), b"a", idempotency_key="order-17")
    again, created_again = await store.create(new_job(), b"b", idempotency_key="order-17")
    other, _ = await store.create(new_job(), b"c", idempotency_key="order-18")
    assert created and not created_again
    assert again.id == first.id and other.id != first.id


async def test_failed_attempts_retry_then_give_up(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    await store.start(job.id, 2, FRESH)
    assert await store.fail(job.id, "boom 1", final=False) == JobState.QUEUED
    assert (await store.start(job.id, 2, FRESH)).action == RUN
    assert await store.fail(job.id, "boom 2", final=True) == JobState.FAILED
    failed = await store.get(job.id)
    assert (failed.state, failed.attempts, failed.error) == (JobState.FAILED, 2, "boom 2")
    with pytest.raises(JobConflict):
        await store.result(job.id)


async def test_a_job_started_past_its_attempts_gives_up(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    assert (await store.start(job.id, 1, FRESH)).action == RUN  # then its worker dies: the broker delivers it again
    start = await store.start(job.id, 1, DEAD)
    assert (start.action, start.attempts) == (GAVE_UP, 2)
    failed = await store.get(job.id)
    assert failed.state == JobState.FAILED and failed.error is not None and "gave up after 1 attempts" in failed.error


async def test_a_redelivery_while_the_attempt_runs_counts_no_attempt(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    assert (await store.start(job.id, 1, FRESH)).action == RUN
    again = await store.start(job.id, 1, FRESH)  # the broker hands it out again while the attempt computes
    assert (again.action, again.attempts) == (BUSY, 1)
    running = await store.get(job.id)
    assert (running.state, running.attempts) == (JobState.RUNNING, 1)
    assert await store.succeed(job.id, b"result", "application/x-npy") is True


async def test_a_running_job_is_busy_while_its_heartbeat_is_fresh_and_runs_again_once_stale(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    assert (await store.start(job.id, 3, FRESH)).action == RUN
    started = await store.get(job.id)
    assert started.heartbeat_at == started.started_at  # starting is the first sign of life
    await asyncio.sleep(0.05)
    assert await store.heartbeat(job.id) is True
    beating = await store.get(job.id)
    assert beating.heartbeat_at is not None and started.started_at is not None
    assert beating.heartbeat_at > started.started_at
    busy = await store.start(job.id, 3, FRESH)  # redelivered while the attempt still beats: given back
    assert (busy.action, busy.attempts) == (BUSY, 1)
    await asyncio.sleep(0.3)  # no heartbeat since: its worker is gone, however young the attempt is
    again = await store.start(job.id, 3, 0.2)
    assert (again.action, again.attempts) == (RUN, 2)
    rerun = await store.get(job.id)
    assert (rerun.state, rerun.attempts) == (JobState.RUNNING, 2)
    assert rerun.heartbeat_at == rerun.started_at  # the new attempt beats from its own start


async def test_only_a_running_job_takes_a_heartbeat(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    assert await store.heartbeat(job.id) is False  # queued: nothing runs it
    await store.start(job.id, 3, FRESH)
    await store.succeed(job.id, b"result", "application/x-npy")
    assert await store.heartbeat(job.id) is False  # a late touch after the result changes nothing
    assert (await store.get(job.id)).state == JobState.SUCCEEDED
    assert await store.heartbeat("no-such-job") is False


async def test_a_late_result_lands_on_a_job_that_gave_up(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    await store.start(job.id, 1, FRESH)
    assert (await store.start(job.id, 1, DEAD)).action == GAVE_UP
    assert await store.succeed(job.id, b"late", "application/x-npy") is True  # the first attempt was alive after all
    done = await store.get(job.id)
    assert (done.state, done.stores, done.error) == (JobState.SUCCEEDED, 1, None)
    assert await store.result(job.id) == (b"late", "application/x-npy")


async def test_a_reported_failure_or_cancel_takes_no_late_result(store: JobStore) -> None:
    failed, _ = await store.create(new_job(), b"p")
    await store.start(failed.id, 3, FRESH)
    await store.fail(failed.id, "cannot decode image", final=True)
    cancelled, _ = await store.create(new_job(), b"p")
    await store.cancel(cancelled.id)
    for job in (failed, cancelled):
        assert await store.succeed(job.id, b"late", "application/x-npy") is False
        assert (await store.get(job.id)).stores == 0


async def test_a_job_keeps_its_owner(store: JobStore) -> None:
    job, _ = await store.create(new_job(owner="alice"), b"p")
    assert (await store.get(job.id)).owner == "alice"
    anonymous, _ = await store.create(new_job(), b"p")
    assert (await store.get(anonymous.id)).owner == ""


async def test_only_a_queued_job_can_be_cancelled(store: JobStore) -> None:
    queued, _ = await store.create(new_job(), b"p")
    assert (await store.cancel(queued.id)).state == JobState.CANCELLED
    assert (await store.start(queued.id, 3, FRESH)).action == SKIP  # its message, when it comes, is dropped
    running, _ = await store.create(new_job(), b"p")
    await store.start(running.id, 3, FRESH)
    with pytest.raises(JobConflict):
        await store.cancel(running.id)
    with pytest.raises(JobNotFound):
        await store.cancel("no-such-job")


async def test_queued_jobs_are_counted_with_the_oldest_age(store: JobStore) -> None:
    first, _ = await store.create(new_job(), b"p")
    await store.create(new_job(), b"p")
    count, oldest = await store.queued()
    assert count == 2 and oldest == pytest.approx(first.created_at)
    await store.start(first.id, 3, FRESH)
    assert (await store.queued())[0] == 1


async def test_a_job_that_succeeds_from_queued_leaves_the_queue(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    assert await store.succeed(job.id, b"result", "application/x-npy") is True  # a result before its start was seen
    assert await store.queued() == (0, None)


async def test_records_expire_after_their_ttl(store: JobStore) -> None:
    store.ttl_s = 0.2
    job, _ = await store.create(new_job(), b"p")
    await asyncio.sleep(0.5)
    with pytest.raises(JobNotFound):
        await store.get(job.id)


async def test_expired_records_are_purged_from_memory() -> None:
    now = [1000.0]
    store = MemoryJobStore(ttl_s=10, clock=lambda: now[0])
    for key in ("a", "b", "c"):
        await store.create(new_job(), b"p", idempotency_key=key)
    now[0] += 11  # all three expired; nobody asks for them again
    await store.create(new_job(), b"p")
    assert len(store) == 1
    assert (await store.create(new_job(), b"p", idempotency_key="a"))[1] is True  # the expired key is free again


async def read_all(store: JobStore, job_id: str) -> tuple[list[bytes], int, str]:
    stored = await store.open_result(job_id)
    return [piece async for piece in stored.chunks], stored.size, stored.content_type


async def test_a_result_appended_piece_by_piece_is_read_back_in_order_and_never_before_it_succeeds(
    store: JobStore,
) -> None:
    job, _ = await store.create(replace(new_job(), kind="video"), b"{}")
    with pytest.raises(JobConflict):
        await store.append_result(job.id, b"early")  # not started: no attempt writes it
    assert (await store.start(job.id, 1, FRESH)).action == RUN
    pieces = [bytes([n]) * (1000 + n) for n in range(5)]
    for piece in pieces:
        await store.append_result(job.id, piece)
    with pytest.raises(JobConflict):
        await store.open_result(job.id)  # still running: a half-written result is never served
    assert await store.succeed_appended(job.id, "application/zip") is True
    got, size, media = await read_all(store, job.id)
    assert b"".join(got) == b"".join(pieces) and size == sum(map(len, pieces)) and media == "application/zip"
    assert await store.succeed_appended(job.id, "application/zip") is False  # counted as a duplicate
    done = await store.get(job.id)
    assert (done.state, done.kind, done.stores, done.duplicates) == (JobState.SUCCEEDED, "video", 1, 1)
    await store.delete(job.id)
    assert (await store.usage("")).total_stored_bytes == 0


async def test_a_whole_result_reads_back_through_open_result_too(store: JobStore) -> None:
    job, _ = await store.create(new_job(), b"p")
    await store.start(job.id, 1, FRESH)
    await store.succeed(job.id, b"x" * 100_000, "application/x-npy")
    got, size, _ = await read_all(store, job.id)
    assert b"".join(got) == b"x" * 100_000 and size == 100_000


async def test_progress_is_shown_and_a_failed_attempt_drops_its_pieces(store: JobStore) -> None:
    job, _ = await store.create(replace(new_job(), kind="video"), b"{}")
    progress = {"frames_done": 0, "frames_total": 9, "fps": None, "eta_s": None}
    assert await store.report(job.id, progress) is True  # queued: waiting for a video place
    await store.start(job.id, 1, FRESH)
    await store.append_result(job.id, b"a" * 5000)
    assert await store.report(job.id, {**progress, "frames_done": 3, "fps": 2.5, "eta_s": 2.4}) is True
    assert (await store.get(job.id)).progress == {"frames_done": 3, "frames_total": 9, "fps": 2.5, "eta_s": 2.4}
    assert (await store.usage("")).total_stored_bytes >= 5000
    assert await store.fail(job.id, "frame 4: no worker could serve it", final=True) == JobState.FAILED
    assert await store.report(job.id, progress) is False  # ended: its runner stops
    with pytest.raises(JobConflict):
        await store.append_result(job.id, b"late")
    assert await store.succeed_appended(job.id, "application/zip") is False
    assert (await store.usage("")).total_stored_bytes < 5000  # the record only: the pieces are gone


async def test_a_job_whose_runner_fell_silent_is_abandoned_clearly_and_a_live_one_is_not(store: JobStore) -> None:
    job, _ = await store.create(replace(new_job(), kind="video"), b"{}")
    await store.start(job.id, 1, FRESH)
    await store.append_result(job.id, b"half")
    assert await store.abandon(job.id, "its gateway stopped", silent_for_s=FRESH) is False  # heartbeat is fresh
    assert await store.abandon(job.id, "its gateway stopped", silent_for_s=DEAD) is True
    failed = await store.get(job.id)
    assert (failed.state, failed.error) == (JobState.FAILED, "its gateway stopped")
    assert await store.succeed_appended(job.id, "application/zip") is False  # a late runner stores nothing
    with pytest.raises(JobConflict):
        await store.open_result(job.id)
    assert await store.abandon(job.id, "again", silent_for_s=DEAD) is False  # already ended
