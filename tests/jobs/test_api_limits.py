"""Job limits and idempotency scopes through a real gateway: in-process (results spooled to disk) and over Redis.

Callers are told apart by their source address (no API keys): 127.0.0.2 and 127.0.0.3 on loopback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests.conftest import require_service

from depthserve.testing.jobs import REDIS_URL, clean_up, unique_namespace
from depthserve.testing.processes import Proc, descendants, start_gateway, start_worker
from depthserve.testing.samples import png_bytes

PNG = {"content-type": "image/png"}
SMALL = png_bytes(np.full((24, 32, 3), 90, dtype=np.uint8))
MIB = 1024 * 1024


def client(url: str, source: str) -> httpx.Client:
    """A client whose connections come from `source`, so the gateway sees it as its own caller."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=source), timeout=60)


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text("probe_inference_every: 0\n" + text)
    return str(path)


def rss_mb(proc: Proc) -> float:
    """Resident memory of a process and all its descendants, MiB."""
    total_kb = 0
    for pid in {proc.pid, *descendants(proc.pid)}:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total_kb / 1024


def wait_final(http: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        body: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        if body["state"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not final: {body}")


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.stop()


LIMITS = "job_max_active_per_caller: 3\njob_max_active: 5\n"


@pytest.mark.parametrize("broker", [None, "redis"])
def test_jobs_queued_or_running_are_limited_per_caller_and_in_total(
    tmp_path: Path, procs: list[Proc], broker: str | None
) -> None:
    if broker:  # nobody pulls from Redis: every accepted job stays queued
        require_service("Redis", "127.0.0.1", 6379)
        namespace = unique_namespace("limits")
        worker, address = start_worker(tmp_path, name="sync-only")
        extra = ["--broker", REDIS_URL, "--job-namespace", namespace]
    else:  # the gateway runs jobs itself, one at a time, on a worker that takes ten minutes for each
        worker, address = start_worker(
            tmp_path, "--synthetic-ms", "600000", "--warmup-requests", "0", "--drain-seconds", "0"
        )
        extra = []
    procs.append(worker)
    settings = LIMITS + "job_concurrency: 1\nper_try_timeout_s: 300\njob_timeout_s: 300\n"
    gateway, url = start_gateway(tmp_path, [address], *extra, "--config", config(tmp_path, settings))
    procs.append(gateway)
    try:
        with client(url, "127.0.0.2") as alice, client(url, "127.0.0.3") as bob:
            replies = [alice.post("/v1/jobs", content=SMALL, headers=PNG) for _ in range(5)]
            replies += [bob.post("/v1/jobs", content=SMALL, headers=PNG) for _ in range(4)]
            codes = [reply.status_code for reply in replies]
            assert codes == [202, 202, 202, 429, 429, 202, 202, 503, 503]
            assert (codes.count(202), codes.count(429) + codes.count(503)) == (5, 4)  # accepted, refused
            for refused in replies[3], replies[7]:
                assert int(refused.headers["retry-after"]) >= 1
            assert replies[3].json()["reason"] == "job_quota" and "job_max_active_per_caller" in replies[3].text
            assert replies[7].json()["reason"] == "jobs_full" and "job_max_active" in replies[7].text
            assert alice.get("/v1/cluster").json()["jobs"]["active"] == 5
            last = replies[2].json()["id"]  # alice's third job is still queued (the first one runs, or waits)
            assert alice.delete(f"/v1/jobs/{last}").json()["state"] == "cancelled"
            assert alice.post("/v1/jobs", content=SMALL, headers=PNG).status_code == 202  # her room came back
            assert bob.post("/v1/jobs", content=SMALL, headers=PNG).status_code == 503  # the total is full again
    finally:
        if broker:
            asyncio.run(clean_up(REDIS_URL, namespace))


def test_large_results_stay_out_of_gateway_memory_and_within_the_byte_limit(tmp_path: Path, procs: list[Proc]) -> None:
    worker, address = start_worker(tmp_path, "--warmup-levels", "0")
    procs.append(worker)
    spool = tmp_path / "spool"
    # One job at a time, and memory read after a few large replies have passed through: each leaves the
    # allocator's pools a little larger until they reach a high-water mark of ~50 MiB (30 jobs measured from
    # cold at 4 at once read 45-101 MiB under load, as much as the 56 MiB they stored). Memory settings at
    # their defaults; the 152 MiB stored below is three times that mark.
    settings = f"job_concurrency: 1\njob_max_stored_mb_per_caller: 160\njob_spool_dir: {spool}\n"
    gateway, url = start_gateway(tmp_path, [address], "--config", config(tmp_path, settings))
    procs.append(gateway)
    flat = png_bytes(np.full((1024, 2048, 3), 90, dtype=np.uint8))  # a few KiB in, an 8 MiB .npy out
    with client(url, "127.0.0.2") as alice:
        warm = alice.post("/v1/jobs", content=SMALL, headers=PNG).json()["id"]
        assert wait_final(alice, warm)["state"] == "succeeded"
        alice.delete(f"/v1/jobs/{warm}/result")
        for _ in range(4):
            warm = alice.post("/v1/jobs", content=flat, headers=PNG).json()["id"]
            assert wait_final(alice, warm)["state"] == "succeeded"
            alice.delete(f"/v1/jobs/{warm}/result")
        before_mb = rss_mb(gateway)
        replies = [alice.post("/v1/jobs", content=flat, headers=PNG) for _ in range(30)]
        assert [reply.status_code for reply in replies] == [202] * 30
        final = [wait_final(alice, reply.json()["id"]) for reply in replies]
        states = [job["state"] for job in final]
        # 8 MiB each: nineteen fit in 160 MiB with the records; the others fail, saying why, and keep nothing
        assert (states.count("succeeded"), states.count("failed")) == (19, 11)
        assert all("not stored" in job["error"] for job in final if job["state"] == "failed")
        spooled = sum(path.stat().st_size for path in spool.rglob("*") if path.is_file())
        assert 19 * 8 * MIB <= spooled <= 160 * MIB
        grown_mb = rss_mb(gateway) - before_mb
        assert grown_mb < 76, f"gateway memory grew by {grown_mb:.0f} MiB for 152 MiB of stored results"
        done = [job["id"] for job in final if job["state"] == "succeeded"]
        fetched = alice.get(f"/v1/jobs/{done[0]}/result")
        assert fetched.status_code == 200 and len(fetched.content) > 8 * MIB - 1024
        for job_id in done:
            assert alice.delete(f"/v1/jobs/{job_id}/result").status_code == 204
            assert alice.get(f"/v1/jobs/{job_id}").status_code == 404
        assert [path for path in spool.rglob("*") if path.is_file()] == []  # every file went with its job
    gateway.stop()
    assert list(spool.iterdir()) == []  # and the spool's own folder with the gateway


def test_a_caller_over_its_stored_bytes_gets_429_until_it_deletes_results(tmp_path: Path, procs: list[Proc]) -> None:
    worker, address = start_worker(tmp_path, "--warmup-levels", "0")
    procs.append(worker)
    settings = f"job_max_stored_mb_per_caller: 10\njob_spool_dir: {tmp_path / 'spool'}\n"
    gateway, url = start_gateway(tmp_path, [address], "--config", config(tmp_path, settings))
    procs.append(gateway)
    noisy = png_bytes(np.random.default_rng(3).integers(0, 256, (1024, 1024, 3), dtype=np.uint8))  # ~3 MiB in
    with client(url, "127.0.0.2") as alice, client(url, "127.0.0.3") as bob:
        kept = []
        for _ in range(2):  # 4 MiB results: 8 MiB kept, and no room for another 3 MiB upload
            reply = alice.post("/v1/jobs", content=noisy, headers=PNG)
            assert reply.status_code == 202 and wait_final(alice, reply.json()["id"])["state"] == "succeeded"
            kept.append(reply.json()["id"])
        refused = alice.post("/v1/jobs", content=noisy, headers=PNG)
        assert refused.status_code == 429 and refused.json()["reason"] == "job_quota"
        assert "DELETE /v1/jobs/{id}/result" in refused.json()["error"] and int(refused.headers["retry-after"]) >= 1
        assert bob.post("/v1/jobs", content=noisy, headers=PNG).status_code == 202  # bob has his own room
        assert alice.delete(f"/v1/jobs/{kept[0]}/result").status_code == 204
        assert alice.post("/v1/jobs", content=noisy, headers=PNG).status_code == 202


def test_idempotency_keys_are_scoped_by_client_address_without_api_keys(tmp_path: Path, procs: list[Proc]) -> None:
    worker, address = start_worker(tmp_path, "--warmup-levels", "0")
    procs.append(worker)
    gateway, url = start_gateway(tmp_path, [address])
    procs.append(gateway)
    headers = {**PNG, "idempotency-key": "upload-1"}
    with client(url, "127.0.0.2") as alice, client(url, "127.0.0.3") as mallory:
        first = alice.post("/v1/jobs", content=SMALL, headers=headers)
        guessed = mallory.post("/v1/jobs", content=SMALL, headers=headers)  # the same key, from elsewhere
        again = alice.post("/v1/jobs", content=SMALL, headers=headers)
    assert (first.status_code, guessed.status_code, again.status_code) == (202, 202, 200)
    assert guessed.json()["id"] != first.json()["id"] == again.json()["id"]
    assert "idempotent-replayed" not in guessed.headers
