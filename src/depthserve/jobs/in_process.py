"""The in-process broker: an asyncio queue inside the gateway, for `depthserve up` without a broker.

Not durable: queued jobs and results are lost when the gateway stops. Use Redis or RabbitMQ for that.
Its deliveries need no touch; the consumer still records heartbeats in the memory store for the jobs it runs.
"""

from __future__ import annotations

import asyncio
from collections import deque

from depthserve.jobs.broker import Broker, Delivery

MAX_DEAD_LETTERS = 10_000  # the newest dead-lettered ids kept for operators; older ones are forgotten


class _Delivery(Delivery):
    def __init__(self, job_id: str, dead: deque[str], queue: asyncio.Queue[str]) -> None:
        self.job_id = job_id
        self._dead = dead
        self._queue = queue

    async def ack(self) -> None:
        """Nothing to acknowledge: the job left the queue when it was taken."""

    async def release(self) -> None:
        """Put the id back at the end of the queue."""
        self._queue.put_nowait(self.job_id)

    async def dead_letter(self, reason: str) -> None:
        """Keep the id (the newest MAX_DEAD_LETTERS), so operators can still see it."""
        self._dead.append(self.job_id)


class InProcessBroker(Broker):
    """Job ids in an asyncio.Queue of this process."""

    kind = "in_process"
    durable = False

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._dead: deque[str] = deque(maxlen=MAX_DEAD_LETTERS)

    async def start(self, prefetch: int | None = None) -> None:
        """Nothing to connect to."""

    async def publish(self, job_id: str) -> None:
        self._queue.put_nowait(job_id)

    async def fetch(self, max_count: int, wait_s: float) -> list[Delivery]:
        out: list[Delivery] = []
        try:
            async with asyncio.timeout(wait_s):
                job_id = await self._queue.get()
        except TimeoutError:
            return out
        out.append(_Delivery(job_id, self._dead, self._queue))
        while len(out) < max_count and not self._queue.empty():
            out.append(_Delivery(self._queue.get_nowait(), self._dead, self._queue))
        return out

    async def depth(self) -> int:
        return self._queue.qsize()

    async def dead_letters(self) -> list[str]:
        return list(self._dead)

    async def close(self) -> None:
        """Nothing to close."""
