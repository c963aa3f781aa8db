"""Where the in-process job store keeps payloads and results: small ones in memory, the rest in files.

A blob of at most SMALL_BLOB_BYTES stays in memory while all such blobs together fit `memory_bytes`;
any other is written to a file in a directory private to this process (`BASE/PID-RANDOM`), so large
results never sit in gateway memory. The job store's byte limits bound the files; each is deleted
with its job (fetched and deleted, cancelled, failed, expired), and the directory on close. A
directory left behind by a process that died without closing is removed by the next spool opened
on the same base. Files are written and read in threads: the event loop never waits for the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from depthserve.jobs.errors import BrokerUnavailable, JobNotFound

SMALL_BLOB_BYTES = 64 * 1024
READ_BYTES = 1 << 20  # one piece of a file read back


@dataclass(frozen=True)
class Blob:
    """One payload or result: its bytes when held in memory, else the file holding them."""

    size: int
    data: bytes | None = None
    path: Path | None = None


def default_base() -> Path:
    """The spool base when none is configured: a folder of this user's in the temp directory."""
    return Path(tempfile.gettempdir()) / f"depthserve-spool-{os.getuid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def remove_stale(base: Path) -> None:
    """Delete spool directories under `base` whose process is gone (it was killed before it could)."""
    for child in base.iterdir() if base.is_dir() else ():
        pid = child.name.split("-", 1)[0]
        if child.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(child, ignore_errors=True)


def _open_directory(base: Path) -> Path:
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    remove_stale(base)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _append_file(path: Path, data: bytes, create: bool) -> None:
    """Append to a blob's file; a file deleted meanwhile (its job ended) is not made again: FileNotFoundError."""
    flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "ab") as out:
        out.write(data)


def _read_piece(handle: BinaryIO) -> bytes:
    return handle.read(READ_BYTES)


def _remove_after(write: asyncio.Future[None], path: Path) -> None:
    """Delete the file a cancelled caller's write left, once the write thread is done (whatever its outcome)."""
    if not write.cancelled():
        write.exception()  # retrieved, so asyncio does not report it as never retrieved
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


class BlobSpool:
    """Keeps blobs for one in-memory job store; `memory_bytes` None keeps every blob in memory."""

    def __init__(self, memory_bytes: int | None, base: Path | None = None) -> None:
        self._memory_limit = memory_bytes
        self._base = base or default_base()
        self._directory: Path | None = None
        self._opening = asyncio.Lock()
        self.in_memory = 0  # bytes of the blobs held in memory
        self.on_disk = 0  # bytes of the blobs held in files

    @property
    def directory(self) -> Path | None:
        """This spool's own directory, once a blob needed it."""
        return self._directory

    def _fits_in_memory(self, size: int) -> bool:
        if self._memory_limit is None:
            return True
        return size <= SMALL_BLOB_BYTES and self.in_memory + size <= self._memory_limit

    async def _new_path(self) -> Path:
        try:
            async with self._opening:
                if self._directory is None:
                    self._directory = await asyncio.to_thread(_open_directory, self._base)
            return self._directory / uuid.uuid4().hex
        except OSError as exc:
            raise BrokerUnavailable(f"job spool {self._base}: {exc}") from exc

    async def extend(self, blob: Blob | None, data: bytes) -> Blob:
        """Append `data` to a blob kept in a file (a new file when `blob` is None) and give the grown blob.

        JobNotFound if the file was dropped meanwhile (its job ended); BrokerUnavailable if it cannot be written.
        """
        path = await self._new_path() if blob is None else blob.path
        assert path is not None, "only blobs kept in files grow"
        try:
            await asyncio.to_thread(_append_file, path, data, blob is None)
        except FileNotFoundError:
            raise JobNotFound("the job's result was dropped while it was written") from None
        except OSError as exc:
            raise BrokerUnavailable(f"job spool {self._directory}: {exc}") from exc
        self.on_disk += len(data)
        return Blob((0 if blob is None else blob.size) + len(data), path=path)

    async def chunks(self, blob: Blob) -> AsyncIterator[bytes]:
        """The bytes of a blob in pieces of at most READ_BYTES, read in threads (the file stays open if dropped)."""
        if blob.path is None:
            if blob.data:
                yield blob.data
            return
        try:
            handle = await asyncio.to_thread(blob.path.open, "rb")
        except FileNotFoundError:
            raise JobNotFound("the job's result was deleted before it was read") from None
        try:
            while piece := await asyncio.to_thread(_read_piece, handle):
                yield piece
        finally:
            handle.close()

    async def keep(self, data: bytes) -> Blob:
        """Hold `data`, in memory or in a new file; BrokerUnavailable if the file cannot be written."""
        size = len(data)
        if self._fits_in_memory(size):
            self.in_memory += size
            return Blob(size, data=bytes(data))
        path = await self._new_path()
        writing = asyncio.ensure_future(asyncio.to_thread(_write_file, path, data))
        try:
            await asyncio.shield(writing)  # a cancelled caller must not leave a half-written file behind
        except asyncio.CancelledError:
            writing.add_done_callback(lambda done: _remove_after(done, path))
            raise
        except OSError as exc:
            path.unlink(missing_ok=True)
            raise BrokerUnavailable(f"job spool {self._directory}: {exc}") from exc
        self.on_disk += size
        return Blob(size, path=path)

    async def read(self, blob: Blob) -> bytes:
        """The bytes of a blob; JobNotFound if its file was deleted meanwhile."""
        if blob.path is None:
            assert blob.data is not None
            return blob.data
        try:
            return await asyncio.to_thread(blob.path.read_bytes)
        except FileNotFoundError:
            raise JobNotFound("the job's data was deleted while it was read") from None
        except OSError as exc:
            raise BrokerUnavailable(f"job spool {self._directory}: {exc}") from exc

    def drop(self, blob: Blob | None) -> None:
        """Let go of a blob: forget its bytes or delete its file."""
        if blob is None:
            return
        if blob.path is None:
            self.in_memory -= blob.size
            return
        self.on_disk -= blob.size
        with contextlib.suppress(OSError):
            blob.path.unlink(missing_ok=True)

    async def close(self) -> None:
        """Delete this spool's directory and every file in it."""
        directory, self._directory = self._directory, None
        if directory is not None:
            await asyncio.to_thread(shutil.rmtree, directory, True)
        self.in_memory = self.on_disk = 0
