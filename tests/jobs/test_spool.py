"""The in-process store keeps large payloads and results in files, deletes each with its job, and leaks none."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from depthserve.jobs import spool as spool_module
from depthserve.jobs.memory_store import MemoryJobStore
from depthserve.jobs.model import Job, new_job_id
from depthserve.jobs.quota import JobLimits
from depthserve.jobs.spool import SMALL_BLOB_BYTES, BlobSpool

BIG = b"x" * (SMALL_BLOB_BYTES + 1)
FRESH = 30.0


def job(owner: str = "alice") -> Job:
    return Job(id=new_job_id(), model="m", created_at=time.time(), owner=owner)


def files(directory: Path | None) -> list[Path]:
    return sorted(directory.iterdir()) if directory is not None and directory.exists() else []


def spooling_store(tmp_path: Path, ttl_s: float = 60.0, memory_bytes: int = 4 * SMALL_BLOB_BYTES) -> MemoryJobStore:
    return MemoryJobStore(ttl_s, limits=JobLimits(memory_bytes=memory_bytes, spool_dir=tmp_path))


async def test_large_payloads_and_results_live_in_files_not_in_memory(tmp_path: Path) -> None:
    store = spooling_store(tmp_path)
    small, _ = await store.create(job(), b"small")
    large, _ = await store.create(job(), BIG)
    assert store.blobs.in_memory == len(b"small") and store.blobs.on_disk == len(BIG)
    assert [path.stat().st_size for path in files(store.blobs.directory)] == [len(BIG)]
    assert await store.payload(large.id) == BIG
    await store.start(large.id, 3, FRESH)
    await store.succeed(large.id, BIG + b"y", "application/x-npy")  # the payload's file goes, the result's comes
    assert [path.stat().st_size for path in files(store.blobs.directory)] == [len(BIG) + 1]
    assert await store.result(large.id) == (BIG + b"y", "application/x-npy")
    await store.delete(large.id)
    assert files(store.blobs.directory) == [] and store.blobs.on_disk == 0
    await store.cancel(small.id)
    assert store.blobs.in_memory == 0
    await store.close()


async def test_memory_holds_small_blobs_only_up_to_its_budget(tmp_path: Path) -> None:
    store = spooling_store(tmp_path, memory_bytes=SMALL_BLOB_BYTES)
    for _ in range(3):
        await store.create(job(), b"s" * (SMALL_BLOB_BYTES // 2))
    assert store.blobs.in_memory == SMALL_BLOB_BYTES and len(files(store.blobs.directory)) == 1
    await store.close()


async def test_cancelled_failed_and_expired_jobs_leave_no_file(tmp_path: Path) -> None:
    store = spooling_store(tmp_path, ttl_s=0.3)
    cancelled, _ = await store.create(job(), BIG)
    failed, _ = await store.create(job(), BIG)
    expired, _ = await store.create(job(), BIG)
    assert len(files(store.blobs.directory)) == 3
    await store.cancel(cancelled.id)
    await store.start(failed.id, 3, FRESH)
    await store.fail(failed.id, "bad input", final=True)
    assert len(files(store.blobs.directory)) == 1
    await asyncio.sleep(0.5)
    await store.queued()  # any later call sweeps what expired
    assert files(store.blobs.directory) == [] and len(store) == 0 and len(store.ledger) == 0
    await store.close()


async def test_close_removes_the_directory(tmp_path: Path) -> None:
    store = spooling_store(tmp_path)
    await store.create(job(), BIG)
    directory = store.blobs.directory
    assert directory is not None and directory.parent == tmp_path and directory.name.startswith(f"{os.getpid()}-")
    await store.close()
    assert not directory.exists()


async def test_a_dead_process_directory_is_removed_by_the_next_spool(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{dead.stdout.strip()}-abc123"
    stale.mkdir()
    (stale / "result").write_bytes(BIG)
    alive = tmp_path / "1-init"  # pid 1 is alive: its directory is left alone
    alive.mkdir()
    spool = BlobSpool(0, tmp_path)
    await spool.keep(BIG)
    assert not stale.exists() and alive.exists()
    await spool.close()


async def test_a_cancelled_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    real_write = spool_module._write_file

    def held_write(path: Path, data: bytes) -> None:
        real_write(path, data[:1])  # the file exists, half written, while the caller is cancelled
        started.set()
        release.wait(30)
        os.truncate(path, len(data))

    monkeypatch.setattr(spool_module, "_write_file", held_write)
    spool = BlobSpool(0, tmp_path)
    writing = asyncio.create_task(spool.keep(BIG))
    await asyncio.to_thread(started.wait, 30)
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert len(files(spool.directory)) == 1  # the thread still writes: its file stays until it is done
    release.set()
    for _ in range(1000):
        if not files(spool.directory):
            break
        await asyncio.sleep(0.01)
    assert files(spool.directory) == [] and spool.on_disk == 0
    await spool.close()
