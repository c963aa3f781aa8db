"""The Redis Streams broker: one stream, one consumer group, XAUTOCLAIM for the jobs of dead consumers.

A delivered entry stays pending (in the group's PEL) until the consumer acknowledges it after the
result is stored; an entry idle longer than the visibility timeout is re-claimed by a live consumer.
A consumer that is still working on a job resets the idle time with XCLAIM (`touch`), just after it
records the job's heartbeat in the job store; a re-claimed entry whose job's heartbeat is still fresh
(a slow touch, not a dead worker) is given back by the consumer, not run twice.
XAUTOCLAIM resumes from the cursor it returned last, so orphans behind many live entries are reached.
If Redis lost the stream and its group (a restart without persistence, FLUSHALL), the next XADD
makes a bare stream; a consumer that then meets NOGROUP creates the group again and carries on.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Any

from depthserve.jobs.broker import Broker, Delivery
from depthserve.jobs.errors import broker_errors
from depthserve.jobs.payloads import read_task, task_message

DEAD_LETTERS_KEPT = 100_000  # the dead-letter stream is trimmed to about this many entries
FORGET_CONSUMER_AFTER_S = 600.0  # a consumer silent this long, holding nothing, is a dead worker's name


class _StreamDelivery(Delivery):
    def __init__(self, broker: RedisStreamsBroker, entry_id: bytes, job_id: str) -> None:
        self.job_id = job_id
        self._broker = broker
        self._entry_id = entry_id

    async def ack(self) -> None:
        """XACK and XDEL in one transaction: the entry leaves the group and the stream."""
        b = self._broker
        with broker_errors("redis streams ack"):
            async with b.redis.pipeline(transaction=True) as pipe:
                pipe.xack(b.stream, b.group, self._entry_id)
                pipe.xdel(b.stream, self._entry_id)
                await pipe.execute()

    async def dead_letter(self, reason: str) -> None:
        """Copy the entry to the dead-letter stream, then acknowledge it, in one transaction."""
        b = self._broker
        with broker_errors("redis streams dead-letter"):
            async with b.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(b.dead_stream, {"id": self.job_id, "reason": reason[:500]}, maxlen=DEAD_LETTERS_KEPT)
                pipe.xack(b.stream, b.group, self._entry_id)
                pipe.xdel(b.stream, self._entry_id)
                await pipe.execute()

    async def release(self) -> None:
        """Leave the entry pending: a consumer re-claims it after the visibility timeout."""

    async def touch(self) -> None:
        """Claim the entry again for this consumer, which resets its idle time."""
        b = self._broker
        with broker_errors("redis streams touch"):
            await b.redis.xclaim(b.stream, b.group, b.consumer, 0, [self._entry_id], justid=True)


class RedisStreamsBroker(Broker):
    """Jobs as entries of the stream `NS:stream`, read by the consumer group `NS:workers`."""

    kind = "redis"

    def __init__(self, url: str, namespace: str, visibility_timeout_s: float) -> None:
        import redis.asyncio as aioredis

        self.redis: Any = aioredis.Redis.from_url(url, socket_connect_timeout=5)
        self.stream = f"{namespace}:stream"
        self.dead_stream = f"{namespace}:dead"
        self.group = f"{namespace}:workers"
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.visibility_ms = max(1, int(visibility_timeout_s * 1000))
        self._next_claim = 0.0
        self._next_prune = 0.0
        self._claim_from: Any = "0-0"

    async def start(self, prefetch: int | None = None) -> None:
        with broker_errors("redis streams"):
            await self._create_group()

    async def _create_group(self) -> None:
        """Create the stream and the consumer group, unless the group exists."""
        import redis.exceptions

        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _recreated_group(self, exc: Exception) -> bool:
        """On NOGROUP (Redis lost the stream or group) create it again and say so; False for other errors."""
        import redis.exceptions

        if not isinstance(exc, redis.exceptions.ResponseError) or "NOGROUP" not in str(exc):
            return False
        await self._create_group()
        self._claim_from = "0-0"
        return True

    async def publish(self, job_id: str) -> None:
        with broker_errors("redis streams publish"):
            await self.redis.xadd(self.stream, {"task": task_message(job_id)})

    def _deliveries(self, entries: Any) -> list[Delivery]:
        out: list[Delivery] = []
        for entry_id, fields in entries or []:
            if not fields:
                continue  # deleted while pending
            try:
                out.append(_StreamDelivery(self, entry_id, read_task(fields[b"task"])))
            except (KeyError, ValueError):
                out.append(_StreamDelivery(self, entry_id, ""))  # not ours: the consumer dead-letters it
        return out

    async def fetch(self, max_count: int, wait_s: float) -> list[Delivery]:
        loop = asyncio.get_running_loop()
        out: list[Delivery] = []
        with broker_errors("redis streams fetch"):
            try:
                if loop.time() >= self._next_claim:
                    self._next_claim = loop.time() + min(1.0, self.visibility_ms / 4000)
                    reply = await self.redis.xautoclaim(
                        self.stream, self.group, self.consumer, self.visibility_ms, self._claim_from, count=max_count
                    )
                    self._claim_from = reply[0]  # "0-0" again once the scan wrapped around
                    out += self._deliveries(reply[1])
                if loop.time() >= self._next_prune:
                    self._next_prune = loop.time() + FORGET_CONSUMER_AFTER_S / 10
                    await self.forget_dead_consumers(max(FORGET_CONSUMER_AFTER_S, 10 * self.visibility_ms / 1000))
                if len(out) < max_count:
                    block = None if out else max(1, int(wait_s * 1000))
                    reply = await self.redis.xreadgroup(
                        self.group, self.consumer, {self.stream: ">"}, count=max_count - len(out), block=block
                    )
                    for _stream, entries in reply or []:
                        out += self._deliveries(entries)
            except Exception as exc:
                if not await self._recreated_group(exc):
                    raise
        return out

    async def forget_dead_consumers(self, idle_s: float) -> list[str]:
        """Drop group consumers idle over `idle_s` with nothing pending (names of killed workers); their names."""
        forgotten: list[str] = []
        with broker_errors("redis streams"):
            try:
                consumers = await self.redis.xinfo_consumers(self.stream, self.group)
            except Exception as exc:
                if not await self._recreated_group(exc):
                    raise
                return forgotten
            for consumer in consumers:
                name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else str(consumer["name"])
                if name != self.consumer and consumer["pending"] == 0 and consumer["idle"] >= idle_s * 1000:
                    await self.redis.xgroup_delconsumer(self.stream, self.group, name)
                    forgotten.append(name)
        return forgotten

    async def depth(self) -> int:
        with broker_errors("redis streams"):
            return int(await self.redis.xlen(self.stream))

    async def dead_letters(self) -> list[str]:
        with broker_errors("redis streams"):
            entries = await self.redis.xrange(self.dead_stream)
        return [fields[b"id"].decode() for _entry_id, fields in entries]

    async def close(self) -> None:
        await self.redis.aclose()

    async def destroy(self) -> None:
        with broker_errors("redis streams"):
            await self.redis.delete(self.stream, self.dead_stream)
