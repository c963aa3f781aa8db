"""Job records in Redis hashes with a TTL; every state change is one Lua script, so it is atomic.

Keys under the namespace NS: `NS:job:ID` (hash: fields of Job, `heartbeat_at` included, plus
`result`), `NS:payload:ID` (the request, stored by reference so broker messages stay small),
`NS:idem:KEY` (idempotency key, which the gateway scopes by caller, -> id),
`NS:queued` (sorted set of queued ids by creation time, for queue age), and the quota keys
described in redis_scripts.py (`NS:usage`, `NS:charges`, `NS:expiry`).
Times are the clients' epoch seconds: heartbeats compare across workers, so their clocks must agree
to well within the visibility timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from depthserve.jobs import redis_scripts
from depthserve.jobs.errors import JobConflict, JobNotFound, ResultNotStored, broker_errors
from depthserve.jobs.model import Job, JobState
from depthserve.jobs.quota import (
    CALLER_BYTES,
    RECORD_BYTES,
    TOTAL_BYTES,
    JobLimits,
    Usage,
    quota_error,
    result_refused_message,
)
from depthserve.jobs.store import BUSY, GAVE_UP, RUN, SKIP, JobStore, Start, StoredResult, gave_up_error

QUOTA_PREFIX = "quota:"  # what the create script answers instead of an id when a limit refuses the job


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisJobStore(JobStore):
    """Job records shared by gateways and workers through one Redis; results expire after `ttl_s`."""

    def __init__(self, url: str, namespace: str, ttl_s: float, limits: JobLimits | None = None) -> None:
        import redis.asyncio as aioredis

        self.ttl_s = ttl_s
        self.limits = limits or JobLimits()
        self.namespace = namespace
        self.redis: Any = aioredis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self._scripts = {
            name: self.redis.register_script(getattr(redis_scripts, name.upper()))
            for name in (
                *("create", "discard", "start", "heartbeat", "succeed", "fail", "cancel", "delete", "usage"),
                *("report", "append", "succeed_appended", "abandon"),
            )
        }

    def _keys(self, job_id: str) -> tuple[str, str]:
        return f"{self.namespace}:job:{job_id}", f"{self.namespace}:payload:{job_id}"

    def _parts_key(self, job_id: str) -> str:
        return f"{self.namespace}:parts:{job_id}"

    @property
    def _queued_key(self) -> str:
        return f"{self.namespace}:queued"

    @property
    def _quota_keys(self) -> list[str]:
        """The usage, charges and expiry keys, in that order (see redis_scripts)."""
        return [f"{self.namespace}:usage", f"{self.namespace}:charges", f"{self.namespace}:expiry"]

    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        job_key, payload_key = self._keys(job.id)
        idem = f"{self.namespace}:idem:{idempotency_key}" if idempotency_key is not None else ""
        fields = [part for pair in job.to_fields().items() for part in pair]
        ttl_ms = int(self.ttl_s * 1000)
        now = time.time()
        args: list[Any] = [
            ttl_ms,
            job.id,
            repr(job.created_at),
            payload,
            f"{self.namespace}:",
            job.owner,
            repr(now),
            repr(now + self.ttl_s),
            *self.limits.as_lua_args(),
            RECORD_BYTES,
            *fields,
        ]
        with broker_errors("job store"):
            keys = [job_key, payload_key, idem, self._queued_key, *self._quota_keys]
            stored = _text(await self._scripts["create"](keys=keys, args=args))
        if stored == job.id:
            return job, True
        if stored.startswith(QUOTA_PREFIX):
            raise quota_error(stored.removeprefix(QUOTA_PREFIX), self.limits)
        return await self.get(stored), False

    async def discard(self, job_id: str, idempotency_key: str | None = None) -> None:
        job_key, payload_key = self._keys(job_id)
        idem = f"{self.namespace}:idem:{idempotency_key}" if idempotency_key is not None else ""
        with broker_errors("job store"):
            keys = [job_key, payload_key, idem, self._queued_key, *self._quota_keys]
            await self._scripts["discard"](keys=keys, args=[job_id])

    async def get(self, job_id: str) -> Job:
        with broker_errors("job store"):
            raw = await self.redis.hgetall(self._keys(job_id)[0])
        if not raw:
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        return Job.from_fields({_text(k): _text(v) for k, v in raw.items() if k != b"result"})

    async def payload(self, job_id: str) -> bytes:
        with broker_errors("job store"):
            data = await self.redis.get(self._keys(job_id)[1])
        if data is None:
            raise JobNotFound(f"job {job_id!r} has no payload (it ended or expired)")
        return bytes(data)

    async def start(self, job_id: str, max_attempts: int, stale_after_s: float) -> Start:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            last = await self.redis.hget(job_key, "error")
            error = gave_up_error(max_attempts, _text(last) if last else None)
            action, attempts = await self._scripts["start"](
                keys=[job_key, payload_key, self._queued_key, *self._quota_keys[:2]],
                args=[repr(time.time()), max_attempts, job_id, error, repr(float(stale_after_s)), RECORD_BYTES],
            )
        action = _text(action)
        return Start({"run": RUN, "busy": BUSY, "gave_up": GAVE_UP}.get(action, SKIP), int(attempts or 0))

    async def heartbeat(self, job_id: str) -> bool:
        with broker_errors("job store"):
            beating = await self._scripts["heartbeat"](keys=[self._keys(job_id)[0]], args=[repr(time.time())])
        return int(beating) == 1

    async def succeed(self, job_id: str, result: bytes, content_type: str) -> bool:
        job_key, payload_key = self._keys(job_id)
        limits = self.limits
        refusals = [result_refused_message(code, limits, len(result)) for code in (CALLER_BYTES, TOTAL_BYTES)]
        now = time.time()
        args: list[Any] = [repr(now), result, content_type, int(self.ttl_s * 1000), job_id, *limits.as_lua_args()[2:]]
        with broker_errors("job store"):
            stored = int(
                await self._scripts["succeed"](
                    keys=[job_key, payload_key, self._queued_key, *self._quota_keys],
                    args=[*args, RECORD_BYTES, *refusals, repr(now + self.ttl_s)],
                )
            )
        if stored < 0:
            raise JobNotFound(f"no job {job_id!r} (expired while it ran)")
        if stored > 1:
            raise ResultNotStored(refusals[stored - 2])
        return stored == 1

    async def fail(self, job_id: str, error: str, final: bool) -> JobState:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            state = _text(
                await self._scripts["fail"](
                    keys=[job_key, payload_key, self._queued_key, *self._quota_keys[:2], self._parts_key(job_id)],
                    args=[repr(time.time()), error, "1" if final else "0", job_id, RECORD_BYTES],
                )
            )
        if state == "gone":
            raise JobNotFound(f"no job {job_id!r} (expired while it ran)")
        return JobState(state)

    async def cancel(self, job_id: str) -> Job:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            state = _text(
                await self._scripts["cancel"](
                    keys=[job_key, payload_key, self._queued_key, *self._quota_keys[:2]],
                    args=[repr(time.time()), job_id, RECORD_BYTES],
                )
            )
        if state == "gone":
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        if state not in ("cancelled",):
            raise JobConflict(f"job {job_id} is {state}; only a queued job can be cancelled", state)
        return await self.get(job_id)

    async def result(self, job_id: str) -> tuple[bytes, str]:
        with broker_errors("job store"):
            state, data, content_type = await self.redis.hmget(self._keys(job_id)[0], "state", "result", "content_type")
        if state is None:
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        if _text(state) != JobState.SUCCEEDED or data is None:
            raise JobConflict(f"job {job_id} is {_text(state)}; it has no result", _text(state))
        return bytes(data), _text(content_type or b"application/octet-stream")

    async def delete(self, job_id: str) -> None:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            state = _text(
                await self._scripts["delete"](
                    keys=[job_key, payload_key, self._queued_key, *self._quota_keys, self._parts_key(job_id)],
                    args=[job_id],
                )
            )
        if state == "gone":
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        if state != "deleted":
            raise JobConflict(f"job {job_id} is {state}; cancel it, or wait until it ends", state)

    async def report(self, job_id: str, progress: dict[str, Any]) -> bool:
        with broker_errors("job store"):
            recorded = await self._scripts["report"](
                keys=[self._keys(job_id)[0]], args=[repr(time.time()), json.dumps(progress)]
            )
        return int(recorded) == 1

    async def append_result(self, job_id: str, data: bytes) -> None:
        job_key, payload_key = self._keys(job_id)
        limits = self.limits
        with broker_errors("job store"):
            written = int(await self.redis.hget(job_key, "partial_bytes") or 0)  # only for the refusal's wording
            refusals = [result_refused_message(c, limits, written + len(data)) for c in (CALLER_BYTES, TOTAL_BYTES)]
            args: list[Any] = [data, *limits.as_lua_args()[2:], int(self.ttl_s * 1000), job_id, repr(time.time())]
            keys = [job_key, self._parts_key(job_id), payload_key, *self._quota_keys[:2]]
            answer = _text(await self._scripts["append"](keys=keys, args=[*args, RECORD_BYTES, *refusals]))
        if answer == "gone":
            raise JobNotFound(f"no job {job_id!r} (expired while it ran)")
        if answer == "refused":
            job = await self.get(job_id)
            raise ResultNotStored(job.error or refusals[0])
        if answer != "ok":
            raise JobConflict(f"job {job_id} is {answer}; its result is no longer written", answer)

    async def succeed_appended(self, job_id: str, content_type: str) -> bool:
        job_key, payload_key = self._keys(job_id)
        now = time.time()
        with broker_errors("job store"):
            keys = [job_key, self._parts_key(job_id), payload_key, self._queued_key, *self._quota_keys]
            args: list[Any] = [repr(now), content_type, int(self.ttl_s * 1000), job_id, RECORD_BYTES]
            args.append(repr(now + self.ttl_s))
            stored = int(await self._scripts["succeed_appended"](keys=keys, args=args))
        if stored < 0:
            raise JobNotFound(f"no job {job_id!r} (expired while it ran)")
        return stored == 1

    async def open_result(self, job_id: str) -> StoredResult:
        with broker_errors("job store"):
            state, content_type, size = await self.redis.hmget(
                self._keys(job_id)[0], "state", "content_type", "result_size"
            )
        if state is None:
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        if _text(state) != JobState.SUCCEEDED:
            raise JobConflict(f"job {job_id} is {_text(state)}; it has no result", _text(state))
        media = _text(content_type or b"application/octet-stream")
        if size is None:  # a result stored whole (an image job's)
            data, _ = await self.result(job_id)
            return StoredResult(media, len(data), _one(data))
        return StoredResult(media, int(size), self._parts(job_id))

    async def _parts(self, job_id: str) -> AsyncIterator[bytes]:
        """The pieces of a result written piece by piece, one round trip each (never the whole list at once)."""
        key, index = self._parts_key(job_id), 0
        while True:
            with broker_errors("job store"):
                piece = await self.redis.lindex(key, index)
            if piece is None:
                return
            yield bytes(piece)
            index += 1

    async def abandon(self, job_id: str, error: str, silent_for_s: float) -> bool:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            failed = await self._scripts["abandon"](
                keys=[job_key, self._parts_key(job_id), payload_key, self._queued_key, *self._quota_keys[:2]],
                args=[repr(time.time()), error, repr(float(silent_for_s)), job_id, RECORD_BYTES],
            )
        return int(failed) == 1

    async def usage(self, owner: str) -> Usage:
        with broker_errors("job store"):
            values = await self._scripts["usage"](
                keys=[*self._quota_keys, self._queued_key], args=[f"{self.namespace}:", repr(time.time()), owner]
            )
        active, stored, total_active, total_stored = (int(value) for value in values)
        return Usage(active, stored, total_active, total_stored)

    async def queued(self) -> tuple[int, float | None]:
        with broker_errors("job store"):
            await self.redis.zremrangebyscore(self._queued_key, "-inf", time.time() - self.ttl_s)
            count = await self.redis.zcard(self._queued_key)
            oldest = await self.redis.zrange(self._queued_key, 0, 0, withscores=True)
        return int(count), (float(oldest[0][1]) if oldest else None)

    async def destroy(self) -> None:
        """Delete every key of this namespace (tests and benchmarks clean up with it)."""
        with broker_errors("job store"):
            async for key in self.redis.scan_iter(match=f"{self.namespace}:*", count=500):
                await self.redis.delete(key)

    async def close(self) -> None:
        await self.redis.aclose()


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data
