"""Helpers for job tests and benchmarks: unique namespaces, clean-up, submitting and awaiting many jobs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from depthserve.jobs.broker import open_broker
from depthserve.jobs.errors import JobError
from depthserve.jobs.redis_store import RedisJobStore

REDIS_URL = "redis://127.0.0.1:6379/0"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
BROKER_URLS = {"redis": REDIS_URL, "amqp": AMQP_URL}
SERVICES = {"redis": ("Redis", "127.0.0.1", 6379), "amqp": ("RabbitMQ", "127.0.0.1", 5672)}
FINAL = ("succeeded", "failed", "cancelled")


def unique_namespace(tag: str) -> str:
    """A key prefix and queue name no other test or engineer uses."""
    return f"dstest-{tag}-{uuid.uuid4().hex[:10]}"


async def clean_up(broker_url: str | None, namespace: str) -> None:
    """Delete the namespace's queues or streams and every job key in Redis (nothing to do in-process)."""
    if not broker_url:
        return
    if broker_url and broker_url.startswith("amqp"):
        broker = open_broker(broker_url, namespace)
        try:
            await broker.start()
            await broker.destroy()
        except JobError:
            pass
        finally:
            await broker.close()
    store = RedisJobStore(REDIS_URL, namespace, 60)
    try:
        await store.destroy()
    finally:
        await store.close()


async def submit_all(
    client: httpx.AsyncClient, bodies: Sequence[bytes], concurrency: int = 16, headers: dict[str, str] | None = None
) -> list[str | None]:
    """POST every body to /v1/jobs; give each job id, or None where the gateway refused it."""
    ids: list[str | None] = [None] * len(bodies)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with semaphore:
            try:
                reply = await client.post(
                    "/v1/jobs", content=bodies[index], headers={"content-type": "image/png", **(headers or {})}
                )
            except httpx.HTTPError:
                return
            if reply.status_code == 202:
                ids[index] = reply.json()["id"]

    await asyncio.gather(*(one(i) for i in range(len(bodies))))
    return ids


async def wait_final(
    client: httpx.AsyncClient, ids: Sequence[str], timeout_s: float = 120.0, concurrency: int = 16
) -> dict[str, dict[str, Any]]:
    """Poll GET /v1/jobs/{id} until every job is final (or the time runs out); give the last status of each."""
    status: dict[str, dict[str, Any]] = {}
    pending = list(ids)
    semaphore = asyncio.Semaphore(concurrency)
    deadline = time.monotonic() + timeout_s

    async def look(job_id: str) -> None:
        async with semaphore:
            reply = await client.get(f"/v1/jobs/{job_id}")
            if reply.status_code == 200:
                status[job_id] = reply.json()

    while pending and time.monotonic() < deadline:
        await asyncio.gather(*(look(job_id) for job_id in pending))
        pending = [job_id for job_id in pending if status.get(job_id, {}).get("state") not in FINAL]
        if pending:
            await asyncio.sleep(0.2)
    return status


class ScriptedExecutor:
    """A job executor for consumer tests: echoes the payload, or fails as scripted per payload."""

    def __init__(self, failures: dict[bytes, tuple[str, bool]] | None = None) -> None:
        self.failures = failures or {}
        self.calls: list[bytes] = []

    async def __call__(self, payload: bytes, timeout_s: float) -> tuple[bytes, str]:
        """Record the call; raise JobFailed(message, permanent) for a scripted payload, else echo it."""
        from depthserve.jobs.consumer import JobFailed

        self.calls.append(payload)
        await asyncio.sleep(0)
        if payload in self.failures:
            message, permanent = self.failures[payload]
            raise JobFailed(message, permanent)
        return b"result:" + payload, "application/octet-stream"
