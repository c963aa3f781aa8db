"""The three brokers behind one interface, against the real Redis and RabbitMQ: delivery, redelivery, DLQ."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from tests.conftest import require_service

from depthserve.jobs.broker import Broker, Delivery, broker_kind, open_broker
from depthserve.jobs.redis_streams import RedisStreamsBroker
from depthserve.testing.jobs import BROKER_URLS, SERVICES, clean_up, unique_namespace

Factory = Callable[..., Awaitable[Broker]]


@pytest.fixture(params=["redis", "amqp", "in_process"])
async def make_broker(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    """Open brokers of one kind on a fresh namespace (several may share it, like workers); clean up after."""
    kind = request.param
    url = BROKER_URLS.get(kind)
    if url is not None:
        require_service(*SERVICES[kind])
    namespace = unique_namespace(f"broker-{kind}")
    opened: list[Broker] = []
    shared: list[Broker] = []

    async def make(prefetch: int | None = 4, visibility_timeout_s: float = 30.0) -> Broker:
        if kind == "in_process" and shared:
            return shared[0]  # one queue per process: the "second consumer" is the same object
        broker = open_broker(url, namespace, visibility_timeout_s)
        await broker.start(prefetch=prefetch)
        opened.append(broker)
        shared.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in opened:
            await broker.close()
        if url is not None:
            await clean_up(url, namespace)


async def fetch_ids(broker: Broker, want: int, wait_s: float = 5.0) -> list[Delivery]:
    """Fetch until `want` deliveries arrived (or the time is up)."""
    got: list[Delivery] = []
    loop = asyncio.get_running_loop()
    ends = loop.time() + wait_s
    while len(got) < want and loop.time() < ends:
        got += await broker.fetch(want - len(got), 0.2)
    return got


def test_the_url_chooses_the_broker() -> None:
    assert broker_kind("redis://127.0.0.1:6379/0") == "redis"
    assert broker_kind("amqp://guest:guest@127.0.0.1:5672/") == "amqp"
    assert broker_kind(None) == "in_process"
    with pytest.raises(ValueError, match="use redis://"):
        broker_kind("kafka://127.0.0.1:9092")


async def test_published_jobs_are_delivered_and_acked(make_broker: Factory) -> None:
    broker = await make_broker()
    for job_id in ("a", "b", "c"):
        await broker.publish(job_id)
    deliveries = await fetch_ids(broker, 3)
    assert sorted(d.job_id for d in deliveries) == ["a", "b", "c"]
    for delivery in deliveries:
        await delivery.ack()
    assert await broker.fetch(3, 0.3) == []
    assert await broker.depth() == 0


async def test_a_job_dead_letters_into_the_dlq(make_broker: Factory) -> None:
    broker = await make_broker()
    await broker.publish("poison")
    (delivery,) = await fetch_ids(broker, 1)
    await delivery.dead_letter("gave up after 3 attempts")
    for _ in range(20):  # RabbitMQ routes the rejected message asynchronously
        if await broker.dead_letters() == ["poison"]:
            break
        await asyncio.sleep(0.1)
    assert await broker.dead_letters() == ["poison"]
    assert await broker.fetch(1, 0.3) == []


@pytest.mark.parametrize("make_broker", ["redis", "amqp"], indirect=True)  # in-process: not durable, by design
async def test_a_dead_consumers_job_goes_to_another(make_broker: Factory) -> None:
    first = await make_broker(visibility_timeout_s=0.5)
    await first.publish("orphan")
    (taken,) = await fetch_ids(first, 1)
    await first.close()  # the consumer dies without acking
    second = await make_broker(visibility_timeout_s=0.5)
    (again,) = await fetch_ids(second, 1, wait_s=10.0)
    assert again.job_id == taken.job_id == "orphan"
    await again.ack()
    assert await second.depth() == 0


async def test_redis_forgets_consumers_of_dead_workers() -> None:
    require_service(*SERVICES["redis"])
    url, namespace = BROKER_URLS["redis"], unique_namespace("consumers")
    first, second = (RedisStreamsBroker(url, namespace, 0.5) for _ in range(2))
    try:
        for broker, job in ((first, "one"), (second, "two")):
            await broker.start()
            await broker.publish(job)
            (taken,) = await fetch_ids(broker, 1)
            await taken.ack()
        await first.close()  # a worker that is gone, but whose name stays in the consumer group
        await asyncio.sleep(0.05)
        assert await second.forget_dead_consumers(idle_s=0.02) == [first.consumer]
        names = [c["name"].decode() for c in await second.redis.xinfo_consumers(second.stream, second.group)]
        assert names == [second.consumer]
    finally:
        await second.close()
        await clean_up(url, namespace)


async def test_redis_recreates_a_lost_consumer_group() -> None:
    require_service(*SERVICES["redis"])
    url, namespace = BROKER_URLS["redis"], unique_namespace("nogroup")
    broker = RedisStreamsBroker(url, namespace, 30.0)
    try:
        await broker.start()
        await broker.redis.delete(broker.stream)  # Redis lost the stream and its group (restart, FLUSHALL)
        await broker.publish("after-the-loss")  # XADD makes a bare stream without the group
        (delivery,) = await fetch_ids(broker, 1)
        assert delivery.job_id == "after-the-loss"
        await delivery.ack()
        assert await broker.forget_dead_consumers(idle_s=3600) == []
    finally:
        await broker.close()
        await clean_up(url, namespace)


async def test_redis_reclaims_an_orphan_behind_many_live_entries() -> None:
    require_service(*SERVICES["redis"])
    url, namespace = BROKER_URLS["redis"], unique_namespace("cursor")
    live, dead, claimer = (RedisStreamsBroker(url, namespace, 1.0) for _ in range(3))
    try:
        for broker in (live, dead, claimer):
            await broker.start()
        for i in range(40):
            await live.publish(f"live-{i}")
        held = await fetch_ids(live, 40)  # a busy worker that keeps touching all its entries
        await dead.publish("orphan")
        (orphan,) = await fetch_ids(dead, 1)
        await dead.close()  # its holder dies: only the orphan ever goes idle
        found: list[Delivery] = []
        loop = asyncio.get_running_loop()
        ends = loop.time() + 15.0
        while not found and loop.time() < ends:
            for delivery in held:
                await delivery.touch()
            found = await claimer.fetch(1, 0.05)  # each claim scans only a few entries of the pending list
        assert [d.job_id for d in found] == [orphan.job_id]
    finally:
        for broker in (live, claimer):
            await broker.close()
        await clean_up(url, namespace)


async def test_rabbitmq_drops_prefetched_messages_of_a_dead_channel() -> None:
    require_service(*SERVICES["amqp"])
    from depthserve.jobs.rabbitmq import RabbitBroker
    from depthserve.testing.tcp_proxy import TcpProxy

    url, namespace = BROKER_URLS["amqp"], unique_namespace("stale")
    proxy = TcpProxy("127.0.0.1", 5672)
    publisher = RabbitBroker(url, namespace)
    consumer = RabbitBroker(url.replace(":5672/", f":{proxy.port}/"), namespace)
    try:
        await publisher.start()
        await consumer.start(prefetch=4)
        for job_id in ("a", "b", "c"):
            await publisher.publish(job_id)
        first = await fetch_ids(consumer, 1)  # the other two wait, prefetched, in the consumer's inbox
        while consumer._inbox.qsize() < 2:
            await asyncio.sleep(0.01)
        proxy.cut()  # the channel dies with its unacknowledged messages: the server requeues all three
        proxy.restore()
        loop = asyncio.get_running_loop()
        ends = loop.time() + 20.0
        while consumer._inbox.qsize() < 5 and loop.time() < ends:  # two stale copies, then all three again
            await asyncio.sleep(0.05)
        again = await fetch_ids(consumer, 3, wait_s=5.0)
        again += await consumer.fetch(3, 0.5)  # nothing more may come: no stale copy runs a second time
        assert sorted(d.job_id for d in again) == ["a", "b", "c"] and len(first) == 1
        for delivery in again:
            await delivery.ack()
    finally:
        await consumer.close()
        await publisher.close()
        proxy.close()
        await clean_up(url, namespace)


async def test_rabbitmq_caps_the_dead_letter_queue() -> None:
    require_service(*SERVICES["amqp"])
    import aio_pika

    from depthserve.jobs.rabbitmq import DEAD_LETTERS_KEPT

    url, namespace = BROKER_URLS["amqp"], unique_namespace("dlqcap")
    broker = open_broker(url, namespace)
    try:
        await broker.start()
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            # Redeclaring with other arguments would fail (PRECONDITION_FAILED): these are the queue's own.
            await channel.declare_queue(
                f"{namespace}.dead", durable=True, arguments={"x-max-length": DEAD_LETTERS_KEPT}
            )
    finally:
        await broker.close()
        await clean_up(url, namespace)
