"""Job records in Redis hashes with a TTL; every state change is one Lua script, so it is atomic.

Keys under the namespace NS: `NS:job:ID` (hash: fields of Job, `heartbeat_at` included, plus
`result`), `NS:payload:ID` (the request, stored by reference so broker messages stay small),
`NS:idem:KEY` (idempotency key, which the gateway scopes by caller, -> id)
and `NS:queued` (sorted set of queued ids by creation time, for queue age).
Times are the clients' epoch seconds: heartbeats compare across workers, so their clocks must agree
to well within the visibility timeout.
"""

from __future__ import annotations

import time
from typing import Any

from depthserve.jobs.errors import JobConflict, JobNotFound, broker_errors
from depthserve.jobs.model import Job, JobState
from depthserve.jobs.store import BUSY, GAVE_UP, RUN, SKIP, JobStore, Start, gave_up_error

_CREATE = """
if KEYS[3] ~= '' then
  local known = redis.call('GET', KEYS[3])
  if known and redis.call('EXISTS', ARGV[5] .. known) == 1 then return known end
  redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[1])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
return ARGV[2]
"""
_DISCARD = """
if KEYS[3] ~= '' and redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
"""
_START = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'skip', 0} end
if state == 'succeeded' or state == 'failed' or state == 'cancelled' then
  redis.call('ZREM', KEYS[3], ARGV[3])
  return {'skip', tonumber(redis.call('HGET', KEYS[1], 'attempts'))}
end
if state == 'running' then
  local beat = redis.call('HGET', KEYS[1], 'heartbeat_at') or redis.call('HGET', KEYS[1], 'started_at') or '0'
  if tonumber(ARGV[1]) - (tonumber(beat) or 0) < tonumber(ARGV[5]) then
    return {'busy', tonumber(redis.call('HGET', KEYS[1], 'attempts'))}
  end
end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('ZREM', KEYS[3], ARGV[3])
if attempts > tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[4], 'gave_up', '1')
  redis.call('DEL', KEYS[2])
  return {'gave_up', attempts}
end
redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', ARGV[1], 'heartbeat_at', ARGV[1])
return {'run', attempts}
"""
_HEARTBEAT = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'heartbeat_at', ARGV[1])
return 1
"""
_SUCCEED = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
local late = state == 'failed' and redis.call('HGET', KEYS[1], 'gave_up') == '1'
if state ~= 'running' and state ~= 'queued' and not late then
  redis.call('HINCRBY', KEYS[1], 'duplicates', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'succeeded', 'finished_at', ARGV[1], 'result', ARGV[2], 'content_type', ARGV[3])
redis.call('HDEL', KEYS[1], 'error', 'gave_up')
redis.call('HINCRBY', KEYS[1], 'stores', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[5])
return 1
"""
_FAIL = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= 'running' then return state end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 'failed'
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'error', ARGV[2])
redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[1], 'created_at'), ARGV[4])
return 'queued'
"""
_CANCEL = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[1])
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  return 'cancelled'
end
return state
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisJobStore(JobStore):
    """Job records shared by gateways and workers through one Redis; results expire after `ttl_s`."""

    def __init__(self, url: str, namespace: str, ttl_s: float) -> None:
        import redis.asyncio as aioredis

        self.ttl_s = ttl_s
        self.namespace = namespace
        self.redis: Any = aioredis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self._scripts = {
            name: self.redis.register_script(text)
            for name, text in (
                ("create", _CREATE),
                ("discard", _DISCARD),
                ("start", _START),
                ("heartbeat", _HEARTBEAT),
                ("succeed", _SUCCEED),
                ("fail", _FAIL),
                ("cancel", _CANCEL),
            )
        }

    def _keys(self, job_id: str) -> tuple[str, str]:
        return f"{self.namespace}:job:{job_id}", f"{self.namespace}:payload:{job_id}"

    @property
    def _queued_key(self) -> str:
        return f"{self.namespace}:queued"

    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        job_key, payload_key = self._keys(job.id)
        idem = f"{self.namespace}:idem:{idempotency_key}" if idempotency_key is not None else ""
        fields = [part for pair in job.to_fields().items() for part in pair]
        ttl_ms = int(self.ttl_s * 1000)
        args: list[Any] = [ttl_ms, job.id, repr(job.created_at), payload, f"{self.namespace}:job:", *fields]
        with broker_errors("job store"):
            keys = [job_key, payload_key, idem, self._queued_key]
            stored = _text(await self._scripts["create"](keys=keys, args=args))
        if stored == job.id:
            return job, True
        return await self.get(stored), False

    async def discard(self, job_id: str, idempotency_key: str | None = None) -> None:
        job_key, payload_key = self._keys(job_id)
        idem = f"{self.namespace}:idem:{idempotency_key}" if idempotency_key is not None else ""
        with broker_errors("job store"):
            await self._scripts["discard"](keys=[job_key, payload_key, idem, self._queued_key], args=[job_id])

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
                keys=[job_key, payload_key, self._queued_key],
                args=[repr(time.time()), max_attempts, job_id, error, repr(float(stale_after_s))],
            )
        action = _text(action)
        return Start({"run": RUN, "busy": BUSY, "gave_up": GAVE_UP}.get(action, SKIP), int(attempts or 0))

    async def heartbeat(self, job_id: str) -> bool:
        with broker_errors("job store"):
            beating = await self._scripts["heartbeat"](keys=[self._keys(job_id)[0]], args=[repr(time.time())])
        return int(beating) == 1

    async def succeed(self, job_id: str, result: bytes, content_type: str) -> bool:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            stored = await self._scripts["succeed"](
                keys=[job_key, payload_key, self._queued_key],
                args=[repr(time.time()), result, content_type, int(self.ttl_s * 1000), job_id],
            )
        if int(stored) < 0:
            raise JobNotFound(f"no job {job_id!r} (expired while it ran)")
        return int(stored) == 1

    async def fail(self, job_id: str, error: str, final: bool) -> JobState:
        job_key, payload_key = self._keys(job_id)
        with broker_errors("job store"):
            state = _text(
                await self._scripts["fail"](
                    keys=[job_key, payload_key, self._queued_key],
                    args=[repr(time.time()), error, "1" if final else "0", job_id],
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
                    keys=[job_key, payload_key, self._queued_key], args=[repr(time.time()), job_id]
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
