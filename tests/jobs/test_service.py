"""Accepting jobs: a job the broker did not take is never left behind, and its idempotency key is free again."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import require_service

from depthserve.jobs.errors import BrokerUnavailable
from depthserve.jobs.rabbitmq import RabbitBroker
from depthserve.jobs.redis_store import RedisJobStore
from depthserve.jobs.service import JobService
from depthserve.testing.jobs import AMQP_URL, REDIS_URL, clean_up, unique_namespace
from depthserve.testing.tcp_proxy import TcpProxy


async def test_a_refused_publish_leaves_no_job_and_frees_the_key() -> None:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("service")
    proxy = TcpProxy("127.0.0.1", 5672)
    broker = RabbitBroker(AMQP_URL.replace(":5672/", f":{proxy.port}/"), namespace, publish_timeout_s=0.5)
    service = JobService(broker, RedisJobStore(REDIS_URL, namespace, ttl_s=60))
    try:
        await service.start()
        proxy.cut()  # the broker is gone while the client submits
        with pytest.raises(BrokerUnavailable):
            await service.submit("m", lambda job_id: b"payload", "key-1")
        assert (await service.store.queued())[0] == 0  # nothing that looks accepted is left behind
        with pytest.raises(BrokerUnavailable):
            await service.stats()  # /v1/cluster shows the outage instead of hanging
        proxy.restore()
        job, created = await service.submit("m", lambda job_id: b"payload", "key-1")
        assert created and (await service.store.get(job.id)).state == "queued"
    finally:
        await service.close()
        proxy.close()
        await clean_up(AMQP_URL, namespace)


async def test_a_submission_cancelled_while_publishing_leaves_no_job() -> None:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("service")
    proxy = TcpProxy("127.0.0.1", 5672)
    broker = RabbitBroker(AMQP_URL.replace(":5672/", f":{proxy.port}/"), namespace, publish_timeout_s=30)
    service = JobService(broker, RedisJobStore(REDIS_URL, namespace, ttl_s=60))
    try:
        await service.start()
        proxy.cut()  # publish now waits for the broker to come back
        submission = asyncio.create_task(service.submit("m", lambda job_id: b"payload", "key-1"))
        while (await service.store.queued())[0] == 0:  # stored: the task is inside publish
            await asyncio.sleep(0.01)
        submission.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await submission
        assert (await service.store.queued())[0] == 0
        proxy.restore()
        job, created = await service.submit("m", lambda job_id: b"payload", "key-1")
        assert created and (await service.store.get(job.id)).state == "queued"  # the key was freed
    finally:
        await service.close()
        proxy.close()
        await clean_up(AMQP_URL, namespace)


async def test_a_broker_down_at_start_is_retried_in_the_background() -> None:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("service")
    proxy = TcpProxy("127.0.0.1", 5672)
    proxy.cut()
    broker = RabbitBroker(AMQP_URL.replace(":5672/", f":{proxy.port}/"), namespace, publish_timeout_s=0.5)
    service = JobService(broker, RedisJobStore(REDIS_URL, namespace, ttl_s=60))
    try:
        await service.start()  # does not raise: the gateway must come up and serve /v1/depth
        with pytest.raises(BrokerUnavailable, match="jobs broker unavailable"):
            await service.submit("m", lambda job_id: b"payload", None)
        with pytest.raises(BrokerUnavailable):
            await service.stats()
        proxy.restore()
        for _ in range(100):
            if service.start_error is None:
                break
            await asyncio.sleep(0.1)
        job, created = await service.submit("m", lambda job_id: b"payload", None)
        assert created and (await service.stats())["queued"] == 1
    finally:
        await service.close()
        proxy.close()
        await clean_up(AMQP_URL, namespace)
