"""The RabbitMQ broker (aio-pika): durable queue, persistent messages, publisher confirms, manual ack.

Queues under the namespace NS: `NS.jobs` (dead-letters to the fanout exchange `NS.dlx`, bound to
`NS.dead`). A consumer's prefetch is its capacity, so RabbitMQ sends a worker a job only while it
has a free slot. The connection is robust: after a cut it reconnects, re-declares and re-consumes;
publishes retry until it is back (or `publish_timeout_s` passes); a message whose ack was lost with
the old channel is delivered again, and the job store keeps its result once. A message redelivered
while its job is running (its consumer's connection dropped, or the consumer was killed) is requeued
until the job's heartbeat in the job store, which a live consumer keeps fresh, is older than the
visibility timeout. Messages prefetched on a channel that has since closed are dropped from the
inbox unrun: the server requeued them already.
The dead-letter queue keeps at most DEAD_LETTERS_KEPT messages (the oldest are dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from depthserve.jobs.broker import Broker, Delivery
from depthserve.jobs.errors import BrokerUnavailable, broker_errors
from depthserve.jobs.payloads import read_task, task_message

log = logging.getLogger("depthserve.jobs")
DEAD_LETTERS_KEPT = 100_000  # x-max-length of the dead-letter queue, as for the Redis dead-letter stream


def _stale(message: Any) -> bool:
    """Whether a prefetched message came on a channel that closed since (a reconnect): it was requeued."""
    import aiormq.exceptions

    try:
        return bool(message.channel.is_closed)
    except (aiormq.exceptions.ChannelInvalidStateError, RuntimeError):
        return True


class _RabbitDelivery(Delivery):
    def __init__(self, message: Any, job_id: str) -> None:
        self.job_id = job_id
        self._message = message

    async def ack(self) -> None:
        with broker_errors("rabbitmq ack"):
            await self._message.ack()

    async def release(self) -> None:
        """Requeue it now (nack with requeue), so no prefetch slot stays taken by a job nobody runs."""
        with broker_errors("rabbitmq release"):
            await self._message.nack(requeue=True)

    async def dead_letter(self, reason: str) -> None:
        """Reject without requeue: the queue's dead-letter exchange routes it to NS.dead."""
        with broker_errors("rabbitmq dead-letter"):
            await self._message.reject(requeue=False)


class RabbitBroker(Broker):
    """Jobs as persistent messages on a durable RabbitMQ queue."""

    kind = "amqp"

    def __init__(self, url: str, namespace: str, publish_timeout_s: float = 15.0) -> None:
        self.url = url
        self.queue_name = f"{namespace}.jobs"
        self.dead_name = f"{namespace}.dead"
        self.exchange_name = f"{namespace}.dlx"
        self.publish_timeout_s = publish_timeout_s
        self._connection: Any = None
        self._publisher: Any = None
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()

    async def _declare(self, channel: Any) -> Any:
        import aio_pika

        dlx = await channel.declare_exchange(self.exchange_name, aio_pika.ExchangeType.FANOUT, durable=True)
        dead = await channel.declare_queue(self.dead_name, durable=True, arguments={"x-max-length": DEAD_LETTERS_KEPT})
        await dead.bind(dlx)
        return await channel.declare_queue(
            self.queue_name, durable=True, arguments={"x-dead-letter-exchange": self.exchange_name}
        )

    async def start(self, prefetch: int | None = None) -> None:
        import aio_pika

        with contextlib.suppress(BrokerUnavailable):
            await self.close()  # a retried start must not leave the connection of the last try open
        with broker_errors("rabbitmq connect"):
            try:
                self._connection = await aio_pika.connect_robust(self.url, timeout=10, reconnect_interval=0.5)
                self._publisher = await self._connection.channel(publisher_confirms=True)
                await self._declare(self._publisher)
                if prefetch is not None:
                    consumer = await self._connection.channel()
                    await consumer.set_qos(prefetch_count=max(1, prefetch))
                    queue = await self._declare(consumer)
                    await queue.consume(self._inbox.put, no_ack=False)
            except BaseException:
                connection, self._connection, self._publisher = self._connection, None, None
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.close()
                raise

    async def publish(self, job_id: str) -> None:
        import aio_pika

        message = aio_pika.Message(
            task_message(job_id), delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id=job_id
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.publish_timeout_s
        while True:
            try:
                with broker_errors("rabbitmq publish"):
                    async with asyncio.timeout(max(0.1, min(5.0, give_up - loop.time()))):
                        await self._publisher.default_exchange.publish(message, routing_key=self.queue_name)
                return
            except BrokerUnavailable as exc:
                if loop.time() >= give_up:
                    raise
                log.info("publish of job %s failed (%s); retrying while the connection recovers", job_id, exc)
                await asyncio.sleep(0.2)

    async def fetch(self, max_count: int, wait_s: float) -> list[Delivery]:
        out: list[Delivery] = []
        loop = asyncio.get_running_loop()
        ends = loop.time() + wait_s
        messages: list[Any] = []
        while not messages:
            try:
                async with asyncio.timeout_at(ends):  # a waiting message is taken without a turn of the loop
                    first = await self._inbox.get()
            except TimeoutError:
                return out
            messages = [first]
            while len(messages) < max_count and not self._inbox.empty():
                messages.append(self._inbox.get_nowait())
            messages = [message for message in messages if not _stale(message)]
        for message in messages:
            try:
                job_id = read_task(message.body)
            except ValueError:
                job_id = ""  # not ours: the consumer dead-letters it
            out.append(_RabbitDelivery(message, job_id))
        return out

    async def depth(self) -> int:
        with broker_errors("rabbitmq"):
            async with asyncio.timeout(2.0):  # while reconnecting, the channel would wait for the broker
                channel = await self._publisher.get_underlay_channel()
                declared = await channel.queue_declare(self.queue_name, passive=True)
        return int(declared.message_count or 0)

    async def dead_letters(self) -> list[str]:
        import aio_pika.exceptions

        ids: list[str] = []
        with broker_errors("rabbitmq"):
            channel = await self._connection.channel()
            try:
                queue = await channel.declare_queue(self.dead_name, passive=True)
                while True:
                    try:
                        message = await queue.get(no_ack=False, timeout=5)
                    except aio_pika.exceptions.QueueEmpty:
                        break
                    if message is None:
                        break
                    ids.append(read_task(message.body))
            finally:
                await channel.close()  # the messages we looked at go back to the dead-letter queue
        return ids

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with broker_errors("rabbitmq close"):
                await connection.close()

    async def destroy(self) -> None:
        with broker_errors("rabbitmq"):
            channel = await self._connection.channel()
            for name in (self.queue_name, self.dead_name):
                await channel.queue_delete(name)
            await channel.exchange_delete(self.exchange_name)
            await channel.close()
