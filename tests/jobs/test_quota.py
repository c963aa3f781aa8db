"""Job limits in both stores (memory and real Redis): jobs and bytes per caller and in total, and no leaks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
from tests.conftest import require_service

from depthserve.jobs.errors import JobConflict, JobNotFound, QuotaExceeded, ResultNotStored
from depthserve.jobs.memory_store import MemoryJobStore
from depthserve.jobs.model import Job, JobState, new_job_id
from depthserve.jobs.quota import RECORD_BYTES, JobLimits, Usage
from depthserve.jobs.redis_store import RedisJobStore
from depthserve.jobs.store import JobStore
from depthserve.testing.jobs import REDIS_URL, clean_up, unique_namespace

LIMITS = JobLimits(
    max_active_per_caller=2,
    max_active=3,
    max_stored_bytes_per_caller=3 * RECORD_BYTES + 1000,
    max_stored_bytes=5 * RECORD_BYTES + 1500,
)
FRESH = 30.0
MakeStore = Callable[[JobLimits, float], JobStore]


@pytest.fixture(params=["memory", "redis"])
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[MakeStore]:
    """Build stores with given limits and TTL: in memory, or in Redis under a namespace of their own."""
    made: list[JobStore] = []
    namespace = unique_namespace("quota")
    if request.param == "redis":
        require_service("Redis", "127.0.0.1", 6379)

    def make(limits: JobLimits, ttl_s: float = 60.0) -> JobStore:
        store: JobStore
        if request.param == "memory":
            store = MemoryJobStore(ttl_s, limits=limits)
        else:
            store = RedisJobStore(REDIS_URL, namespace, ttl_s, limits)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()
    if request.param == "redis":
        await clean_up(REDIS_URL, namespace)


def job(owner: str) -> Job:
    return Job(id=new_job_id(), model="m", created_at=time.time(), owner=owner)


async def refused(store: JobStore, owner: str, payload: bytes = b"p") -> QuotaExceeded:
    with pytest.raises(QuotaExceeded) as error:
        await store.create(job(owner), payload)
    return error.value


async def test_jobs_queued_or_running_are_limited_per_caller_then_in_total(make_store: MakeStore) -> None:
    store = make_store(LIMITS, 60.0)
    first, _ = await store.create(job("alice"), b"p")
    await store.create(job("alice"), b"p")
    mine = await refused(store, "alice")
    assert mine.scope == "caller" and "job_max_active_per_caller" in str(mine) and mine.retry_after_s > 0
    await store.create(job("bob"), b"p")  # the third job of all: still within the total
    full = await refused(store, "bob")
    assert full.scope == "total" and "job_max_active" in str(full)
    await store.start(first.id, 3, FRESH)
    assert (await store.usage("alice")).active == 2  # running still counts
    await store.succeed(first.id, b"r", "application/x-npy")
    assert (await store.usage("alice")).active == 1 and (await store.usage("bob")).total_active == 2
    await store.create(job("alice"), b"p")  # room again once one ended


async def test_an_idempotent_replay_is_never_refused(make_store: MakeStore) -> None:
    store = make_store(LIMITS, 60.0)
    kept, _ = await store.create(job("alice"), b"p", idempotency_key="alice:k")
    await store.create(job("alice"), b"p")
    again, created = await store.create(job("alice"), b"p", idempotency_key="alice:k")
    assert again.id == kept.id and not created


async def test_payload_bytes_are_limited_before_the_job_is_stored(make_store: MakeStore) -> None:
    store = make_store(LIMITS, 60.0)
    too_big = await refused(store, "alice", b"x" * (2 * RECORD_BYTES + 1001))
    assert too_big.scope == "caller" and "job_max_stored_mb_per_caller" in str(too_big)
    assert await store.usage("alice") == Usage()  # a refused job holds nothing
    assert await store.queued() == (0, None)


async def test_a_result_past_the_byte_limit_fails_its_job_and_is_not_kept(make_store: MakeStore) -> None:
    store = make_store(LIMITS, 60.0)
    small, _ = await store.create(job("alice"), b"p")
    large, _ = await store.create(job("alice"), b"p")
    assert await store.succeed(small.id, b"r" * 900, "application/x-npy") is True
    with pytest.raises(ResultNotStored, match="job_max_stored_mb_per_caller"):
        await store.succeed(large.id, b"r" * 2000, "application/x-npy")
    failed = await store.get(large.id)
    assert failed.state == JobState.FAILED and failed.error is not None and "not stored" in failed.error
    with pytest.raises(JobConflict):
        await store.result(large.id)
    assert await store.usage("alice") == Usage(0, 2 * RECORD_BYTES + 900, 0, 2 * RECORD_BYTES + 900)
    assert await store.succeed(large.id, b"r", "application/x-npy") is False  # a later delivery: a duplicate


async def test_the_total_byte_limit_refuses_what_no_single_caller_reaches(make_store: MakeStore) -> None:
    store = make_store(LIMITS, 60.0)
    for owner in ("alice", "bob"):
        done, _ = await store.create(job(owner), b"p")
        await store.succeed(done.id, b"r" * 1400, "application/x-npy")
    carol, _ = await store.create(job("carol"), b"p")
    with pytest.raises(ResultNotStored, match="job store is full"):
        await store.succeed(carol.id, b"r" * 1400, "application/x-npy")
    full = await refused(store, "dave", b"x" * 600)
    assert full.scope == "total" and "job_max_stored_mb" in str(full)


async def test_every_way_out_gives_back_what_a_job_held(make_store: MakeStore) -> None:
    store = make_store(JobLimits(max_active=100, max_stored_bytes=10**9), 60.0)
    fetched, _ = await store.create(job("alice"), b"p" * 50)
    await store.start(fetched.id, 3, FRESH)
    await store.succeed(fetched.id, b"r" * 70, "application/x-npy")
    assert (await store.usage("alice")).stored_bytes == RECORD_BYTES + 70
    cancelled, _ = await store.create(job("alice"), b"p")
    await store.cancel(cancelled.id)
    failed, _ = await store.create(job("alice"), b"p")
    await store.start(failed.id, 3, FRESH)
    await store.fail(failed.id, "bad input", final=True)
    gave_up, _ = await store.create(job("alice"), b"p")
    await store.start(gave_up.id, 1, FRESH)
    await store.start(gave_up.id, 1, 0.0)
    discarded, _ = await store.create(job("alice"), b"p")
    await store.discard(discarded.id)
    assert await store.usage("alice") == Usage(0, 4 * RECORD_BYTES + 70, 0, 4 * RECORD_BYTES + 70)
    running, _ = await store.create(job("alice"), b"p")
    await store.start(running.id, 3, FRESH)
    with pytest.raises(JobConflict, match="cancel it, or wait"):
        await store.delete(running.id)  # a job still queued or running is not deleted
    for ended in (fetched, cancelled, failed, gave_up):
        await store.delete(ended.id)
        with pytest.raises(JobNotFound):
            await store.get(ended.id)
    with pytest.raises(JobNotFound):
        await store.delete(fetched.id)
    await store.succeed(running.id, b"", "application/x-npy")
    await store.delete(running.id)
    assert await store.usage("alice") == Usage()


async def test_expired_jobs_give_back_their_charge(make_store: MakeStore) -> None:
    store = make_store(JobLimits(max_active_per_caller=1), 0.3)
    await store.create(job("alice"), b"p")
    await refused(store, "alice")
    await asyncio.sleep(0.6)  # the queued job expired without ever running
    assert await store.usage("alice") == Usage()
    await store.create(job("alice"), b"p")


async def test_redis_keeps_no_charge_after_every_job_is_gone() -> None:
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("quota-keys")
    store = RedisJobStore(REDIS_URL, namespace, 0.3, JobLimits(max_active=10))
    try:
        for _ in range(3):
            await store.create(job("alice"), b"p")
        kept, _ = await store.create(job("bob"), b"p")
        await store.succeed(kept.id, b"r", "application/x-npy")
        await asyncio.sleep(0.6)
        assert await store.usage("bob") == Usage()
        leftovers = [key async for key in store.redis.scan_iter(match=f"{namespace}:*")]
        assert leftovers == []  # records, payloads, charges, usage counters and expiry entries: all gone
    finally:
        await store.close()
        await clean_up(REDIS_URL, namespace)


async def test_a_result_written_piece_by_piece_fails_its_job_as_soon_as_it_would_break_a_byte_limit(
    make_store: MakeStore,
) -> None:
    store = make_store(LIMITS)
    video, _ = await store.create(job("alice"), b"")
    await store.start(video.id, 1, FRESH)
    await store.append_result(video.id, b"x" * 600)
    with pytest.raises(ResultNotStored, match="not stored"):
        await store.append_result(video.id, b"x" * 3000)  # past 3 records + 1000 bytes, the caller's limit
    failed = await store.get(video.id)
    assert failed.state == JobState.FAILED and "job_max_stored_mb_per_caller" in (failed.error or "")
    assert await store.usage("alice") == Usage(0, RECORD_BYTES, 0, RECORD_BYTES)  # the pieces were given back
