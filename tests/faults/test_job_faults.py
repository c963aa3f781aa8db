"""Job fault drills with real processes, real Redis and RabbitMQ: every accepted job is counted.

Each drill reports sent / accepted / succeeded / failed / lost / stored twice / delivered again.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests.conftest import require_service

from depthserve.jobs.model import JobState
from depthserve.jobs.redis_store import RedisJobStore
from depthserve.probes import free_port
from depthserve.testing.jobs import (
    AMQP_URL,
    BROKER_URLS,
    REDIS_URL,
    SERVICES,
    clean_up,
    submit_all,
    unique_namespace,
    wait_final,
)
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image
from depthserve.testing.tcp_proxy import TcpProxy

JOBS = 500


def sizes(count: int) -> list[tuple[int, int]]:
    """A distinct image size per job, so each result shows which job it belongs to."""
    return [(8 + i // 25, 8 + i % 25) for i in range(count)]


Fault = Callable[[list[str]], Awaitable[None] | None]
"""Given the ids of the jobs accepted so far, break something (synchronously or not)."""


async def drill(url: str, namespace: str, count: int, fault: Fault, fault_after: int) -> dict[str, Any]:
    """Submit `count` jobs, inject `fault` once `fault_after` are accepted and some finished, then count outcomes."""
    shapes = sizes(count)
    bodies = [png_bytes(seeded_image(h, w, seed=i)) for i, (h, w) in enumerate(shapes)]
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        first = await submit_all(client, bodies[:fault_after])
        await wait_final(client, [job_id for job_id in first[:5] if job_id], timeout_s=30)
        broken = fault([job_id for job_id in first if job_id])
        if inspect.isawaitable(broken):
            await broken
        rest = await submit_all(client, bodies[fault_after:])
        ids = first + rest
        accepted = [job_id for job_id in ids if job_id]
        status = await wait_final(client, accepted, timeout_s=120)
        wrong = 0
        for (h, w), job_id in zip(shapes, ids, strict=True):
            if job_id and status.get(job_id, {}).get("state") == "succeeded":
                reply = await client.get(f"/v1/jobs/{job_id}/result")
                wrong += reply.status_code != 200 or np.load(io.BytesIO(reply.content)).shape != (h, w)
    store = RedisJobStore(REDIS_URL, namespace, 60)
    try:
        records = [await store.get(job_id) for job_id in accepted]
    finally:
        await store.close()
    states = [status.get(job_id, {}).get("state") for job_id in accepted]
    counts = {
        "sent": count,
        "accepted": len(accepted),
        "succeeded": states.count("succeeded"),
        "failed": states.count("failed"),
        "lost": sum(state != "succeeded" and state != "failed" for state in states),
        "wrong_result": wrong,
        "stored_twice": sum(r.stores > 1 for r in records),
        "stored_once": sum(r.stores == 1 for r in records),
        "delivered_again": sum(r.attempts > 1 for r in records),
        "computed_twice": sum(r.duplicates > 0 for r in records),
    }
    print(f"\n{namespace}: {counts}")
    return counts


def stop_all(procs: list[Proc]) -> None:
    for proc in reversed(procs):
        proc.stop()


async def kill_holding_a_running_job(worker: Proc, namespace: str, ids: list[str], tries: int = 200) -> list[str]:
    """SIGKILL `worker`, the only one pulling jobs so far, at a moment it provably runs some; give their ids.

    Each try freezes it (SIGSTOP) and reads the store: a job `running` then is one it started and can no
    longer finish, so the kill leaves an attempt that must run again. Otherwise it resumes for a moment.
    """
    store = RedisJobStore(REDIS_URL, namespace, 60)
    try:
        for _ in range(tries):
            os.kill(worker.pid, signal.SIGSTOP)
            running = [job_id for job_id in ids if (await store.get(job_id)).state == JobState.RUNNING]
            if running:
                worker.kill()
                return running
            os.kill(worker.pid, signal.SIGCONT)
            await asyncio.sleep(0.05)
    finally:
        await store.close()
    raise AssertionError(f"the worker never held a running job in {tries} looks")


@pytest.mark.parametrize("broker", ["redis", "amqp"])
def test_500_jobs_survive_a_worker_killed_mid_job(tmp_path: Path, broker: str) -> None:
    require_service(*SERVICES[broker])
    require_service(*SERVICES["redis"])
    namespace = unique_namespace(f"kill-{broker}")
    # The victim's jobs run again once their heartbeats are older than the visibility timeout (the job
    # timeout keeps its 60 s default: it plays no part), so a short visibility timeout keeps the drill short.
    flags = [
        *("--broker", BROKER_URLS[broker], "--job-namespace", namespace),
        *("--job-visibility-timeout-s", "2"),
    ]
    procs: list[Proc] = []
    held: list[str] = []
    survivor_port = free_port()
    try:
        # The victim pulls alone until it dies, so every running job is its own; the survivor starts then.
        victim, victim_address = start_worker(tmp_path, *flags, "--synthetic-ms", "20", name="victim")
        procs.append(victim)
        gateway, url = start_gateway(tmp_path, [victim_address, f"127.0.0.1:{survivor_port}"], *flags)
        procs.append(gateway)

        async def kill_victim_mid_job(accepted: list[str]) -> None:
            held.extend(await kill_holding_a_running_job(victim, namespace, accepted))
            # Started on this (the main) thread, not a pool thread: its parent-death signal follows the thread.
            survivor, _ = start_worker(tmp_path, *flags, "--synthetic-ms", "10", port=survivor_port, name="survivor")
            procs.append(survivor)

        counts = asyncio.run(drill(url, namespace, JOBS, kill_victim_mid_job, fault_after=JOBS // 2))
        assert not victim.alive() and procs[-1].alive()
        attempts = asyncio.run(attempts_of(namespace, held))
    finally:
        stop_all(procs)
        asyncio.run(clean_up(BROKER_URLS[broker], namespace))
    assert counts["accepted"] == counts["sent"] == JOBS
    assert counts["succeeded"] == JOBS and counts["lost"] == 0 and counts["wrong_result"] == 0
    assert counts["stored_once"] == JOBS and counts["stored_twice"] == 0
    assert held and all(count >= 2 for count in attempts)  # what the victim ran when killed ran again elsewhere
    assert counts["delivered_again"] >= len(held)


async def attempts_of(namespace: str, ids: list[str]) -> list[int]:
    """How many attempts each job took, from the job store."""
    store = RedisJobStore(REDIS_URL, namespace, 60)
    try:
        return [(await store.get(job_id)).attempts for job_id in ids]
    finally:
        await store.close()


def test_rabbitmq_connection_cut_loses_no_accepted_job(tmp_path: Path) -> None:
    require_service(*SERVICES["amqp"])
    require_service(*SERVICES["redis"])
    proxy = TcpProxy("127.0.0.1", 5672)
    namespace = unique_namespace("cut-amqp")
    via_proxy = AMQP_URL.replace(":5672/", f":{proxy.port}/")
    flags = ["--broker", via_proxy, "--job-store", REDIS_URL, "--job-namespace", namespace]
    procs: list[Proc] = []

    def cut_for_a_while(_accepted: list[str]) -> None:
        proxy.cut()  # every client's connection drops mid-run: publishers and consumers alike
        threading_timer(1.5, proxy.restore)

    try:
        for name in ("w1", "w2"):
            proc, address = start_worker(tmp_path, *flags, "--synthetic-ms", "20", name=name)
            procs.append(proc)
        gateway, url = start_gateway(tmp_path, [address], *flags)
        procs.append(gateway)
        counts = asyncio.run(drill(url, namespace, 300, cut_for_a_while, fault_after=150))
    finally:
        stop_all(procs)
        proxy.close()
        asyncio.run(clean_up(AMQP_URL, namespace))
    assert proxy.cuts == 1
    assert counts["accepted"] >= 150  # every job sent before the cut was accepted
    assert counts["lost"] == 0 and counts["failed"] == 0 and counts["wrong_result"] == 0
    assert counts["succeeded"] == counts["accepted"] and counts["stored_twice"] == 0


def threading_timer(delay_s: float, action: Callable[[], None]) -> None:
    """Run `action` once after `delay_s` on a helper thread (the drill's event loop keeps submitting)."""
    import threading

    timer = threading.Timer(delay_s, action)
    timer.daemon = True
    timer.start()
