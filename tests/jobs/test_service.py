"""Accepting jobs: a job the broker did not take is never left behind, and its idempotency key is free again."""

from __future__ import annotations

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
