"""Async jobs: end-to-end jobs/s per broker, and the latency the job path adds over /v1/depth.

For each broker (Redis Streams, RabbitMQ, in-process) one cluster runs: a gateway and two synthetic
workers at 0 ms service time, all pulling from the same namespace. In that one cluster, side by side:

- throughput: N jobs submitted with C in flight, until every one is final (jobs/s), against the same N
  synchronous POST /v1/depth requests with C in flight (req/s);
- latency, one request at a time, alternating: POST /v1/depth, against POST /v1/jobs + polling
  GET /v1/jobs/{id} every 2 ms + GET the result (what a client of the job path waits for).

    python bench/jobs.py [--jobs 500] [--concurrency 32] [--sequential 100] [--brokers redis,amqp,in_process]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from depthserve.testing.jobs import BROKER_URLS, SERVICES, clean_up, submit_all, unique_namespace, wait_final
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

HEADERS = {"content-type": "image/png"}


def reachable(host: str, port: int) -> bool:
    """Whether a broker accepts TCP connections."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of the values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sync_throughput(client: httpx.AsyncClient, body: bytes, count: int, concurrency: int) -> tuple[float, int]:
    """POST /v1/depth `count` times with `concurrency` in flight; give req/s and failures."""
    semaphore = asyncio.Semaphore(concurrency)
    failed = 0

    async def one() -> None:
        nonlocal failed
        async with semaphore:
            reply = await client.post("/v1/depth", content=body, headers=HEADERS)
            failed += reply.status_code != 200

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return count / (time.perf_counter() - started), failed


async def job_throughput(client: httpx.AsyncClient, body: bytes, count: int, concurrency: int) -> tuple[float, int]:
    """Submit `count` jobs with `concurrency` in flight and wait until all are final; give jobs/s and failures."""
    started = time.perf_counter()
    ids = await submit_all(client, [body] * count, concurrency)
    accepted = [job_id for job_id in ids if job_id]
    status = await wait_final(client, accepted, timeout_s=300, concurrency=concurrency)
    elapsed = time.perf_counter() - started
    succeeded = sum(s.get("state") == "succeeded" for s in status.values())
    return count / elapsed, count - succeeded


async def one_job(client: httpx.AsyncClient, body: bytes) -> float:
    """Seconds from POST /v1/jobs to holding the result, polling every 2 ms."""
    started = time.perf_counter()
    job_id = (await client.post("/v1/jobs", content=body, headers=HEADERS)).json()["id"]
    while (await client.get(f"/v1/jobs/{job_id}")).json()["state"] not in ("succeeded", "failed"):
        await asyncio.sleep(0.002)
    reply = await client.get(f"/v1/jobs/{job_id}/result")
    if reply.status_code != 200:
        raise SystemExit(f"job {job_id} gave {reply.status_code}: {reply.text}")
    return time.perf_counter() - started


async def latencies(client: httpx.AsyncClient, body: bytes, count: int) -> tuple[list[float], list[float]]:
    """Alternate one synchronous request and one job, `count` of each; give both latency lists in ms."""
    sync_ms: list[float] = []
    job_ms: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        reply = await client.post("/v1/depth", content=body, headers=HEADERS)
        if reply.status_code != 200:
            raise SystemExit(f"/v1/depth gave {reply.status_code}: {reply.text}")
        sync_ms.append((time.perf_counter() - started) * 1000)
        job_ms.append(await one_job(client, body) * 1000)
    return sync_ms, job_ms


async def measure(url: str, body: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then every leg against one cluster."""
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=64)) as client:
        await latencies(client, body, 10)  # warm-up: connections, caches, consumer groups
        sync_ms, job_ms = await latencies(client, body, args.sequential)
        sync_rps, sync_failed = await sync_throughput(client, body, args.jobs, args.concurrency)
        jobs_ps, jobs_failed = await job_throughput(client, body, args.jobs, args.concurrency)
    return {
        "sync_rps": sync_rps,
        "jobs_ps": jobs_ps,
        "failed": sync_failed + jobs_failed,
        "sync_p50": statistics.median(sync_ms),
        "sync_p90": percentile(sync_ms, 0.9),
        "job_p50": statistics.median(job_ms),
        "job_p90": percentile(job_ms, 0.9),
    }


def run_broker(kind: str, body: bytes, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """Start a cluster on the broker, measure, stop it, clean the namespace."""
    url = BROKER_URLS.get(kind)
    namespace = unique_namespace(f"bench-{kind}")
    flags = ["--job-namespace", namespace, "--job-concurrency", str(args.job_concurrency)]
    if url:
        flags += ["--broker", url]
    procs: list[Proc] = []
    try:
        addresses = []
        for index in range(2):
            proc, address = start_worker(logs, *flags, "--warmup-levels", "0", name=f"{kind}-{index}")
            procs.append(proc)
            addresses.append(address)
        gateway, gateway_url = start_gateway(logs, addresses, *flags, "--job-concurrency", str(args.job_concurrency))
        procs.append(gateway)
        return asyncio.run(measure(gateway_url, body, args))
    finally:
        for proc in reversed(procs):
            proc.stop()
        asyncio.run(clean_up(url, namespace))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500, help="jobs (and sync requests) in the throughput legs")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight in the throughput legs")
    parser.add_argument("--sequential", type=int, default=100, help="requests of each kind in the latency legs")
    parser.add_argument("--job-concurrency", type=int, default=8, help="jobs each worker (or gateway) runs at once")
    parser.add_argument("--brokers", default="redis,amqp,in_process")
    args = parser.parse_args()
    body = png_bytes(seeded_image(48, 64))
    console = Console(width=160)
    markdown: list[str] = []
    table = Table(title=f"Async jobs: {args.jobs} jobs, {args.concurrency} in flight; latency one at a time")
    for column in (
        "broker",
        "sync req/s",
        "jobs/s",
        "jobs/s ÷ sync",
        "sync p50 ms",
        "job p50 ms",
        "added p50 ms",
        "sync p90 ms",
        "job p90 ms",
        "failed",
    ):
        table.add_column(column, justify="right")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as logs:
        for kind in args.brokers.split(","):
            if kind in SERVICES and not reachable(*SERVICES[kind][1:]):
                console.print(f"[yellow]{kind}: not reachable, skipped[/yellow]")
                continue
            r = run_broker(kind, body, args, Path(logs))
            table.add_row(
                kind,
                f"{r['sync_rps']:.0f}",
                f"{r['jobs_ps']:.0f}",
                f"{r['jobs_ps'] / r['sync_rps']:.2f}",
                f"{r['sync_p50']:.1f}",
                f"{r['job_p50']:.1f}",
                f"{r['job_p50'] - r['sync_p50']:+.1f}",
                f"{r['sync_p90']:.1f}",
                f"{r['job_p90']:.1f}",
                str(r["failed"]),
            )
            markdown.append(
                f"| {kind} | {r['sync_rps']:.0f} | {r['jobs_ps']:.0f} | {r['jobs_ps'] / r['sync_rps']:.2f} "
                f"| {r['sync_p50']:.1f} | {r['job_p50']:.1f} | {r['job_p50'] - r['sync_p50']:+.1f} "
                f"| {r['job_p50'] / r['sync_p50']:.2f} | {r['sync_p90']:.1f} | {r['job_p90']:.1f} | {r['failed']} |"
            )
    console.print(table)
    print(
        "| broker | sync req/s | jobs/s | jobs/s ÷ sync | sync p50 ms | job p50 ms | added p50 ms | p50 ratio "
        "| sync p90 ms | job p90 ms | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(markdown))
    console.print(f"(bench took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
