"""What a gateway's processes share, in one memory-mapped file: the gateway-wide slot count, each process's
queue length, and the rate-limit buckets, so limits hold for the gateway as a whole, not per process.

The file and its lock live in a directory only this user can read (made by `create`, removed by
`remove`); every process maps the file and opens the lock itself (flock locks belong to an open
file, so one inherited across fork would not exclude). Updates are a few struct reads and writes
under the lock: microseconds, only on the paths that need them.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_PROCESSES = 64
SLOTS = 16_384  # rate-limit buckets; identities past this evict the least recently used nearby
PROBES = 8  # buckets looked at per identity (open addressing)
_HEAD = struct.Struct("<qq")  # next process index, slots taken gateway-wide
_QUEUE = struct.Struct("<q")  # one process's waiters
_BUCKET = struct.Struct("<Qdd")  # identity hash (0 = free), tokens, last update
_QUEUES_AT = _HEAD.size
_TABLE_AT = _QUEUES_AT + MAX_PROCESSES * _QUEUE.size
SIZE = _TABLE_AT + SLOTS * _BUCKET.size
STATE_FILE, LOCK_FILE = "state", "lock"


def _key(identity: str) -> int:
    """A stable 64-bit hash (the same in every process, unlike hash()), never 0."""
    return int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "little") | 1


class SharedState:
    """One process's handle on the shared block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        with open(directory / STATE_FILE, "r+b") as state:
            self._map = mmap.mmap(state.fileno(), SIZE)
        self._lock = os.open(directory / LOCK_FILE, os.O_RDWR)

    @staticmethod
    def create(processes: int) -> Path:
        """Make the private directory and the zeroed block for `processes` processes; give the directory."""
        if not 1 <= processes <= MAX_PROCESSES:
            raise ValueError(f"processes must be 1..{MAX_PROCESSES}")
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        directory = Path(tempfile.mkdtemp(prefix="depthserve-gateway-", dir=base))  # mode 0700
        with open(directory / STATE_FILE, "wb") as state:
            state.truncate(SIZE)
        (directory / LOCK_FILE).touch(mode=0o600)
        return directory

    @staticmethod
    def remove(directory: Path) -> None:
        """Delete the block, its lock and the processes' sockets (when the gateway stops)."""
        shutil.rmtree(directory, ignore_errors=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the lock every process takes to change the block."""
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    def claim_index(self) -> int:
        """This process's number, 0 for the first to ask."""
        with self.locked():
            index, taken = _HEAD.unpack_from(self._map, 0)
            _HEAD.pack_into(self._map, 0, index + 1, taken)
        return int(index)

    def try_take(self, limit: int) -> bool:
        """Take one of `limit` gateway-wide slots if one is free."""
        with self.locked():
            index, taken = _HEAD.unpack_from(self._map, 0)
            if taken >= limit:
                return False
            _HEAD.pack_into(self._map, 0, index, taken + 1)
        return True

    def give_back(self) -> None:
        """Return a slot taken by try_take."""
        with self.locked():
            index, taken = _HEAD.unpack_from(self._map, 0)
            _HEAD.pack_into(self._map, 0, index, max(0, taken - 1))

    @property
    def taken(self) -> int:
        """Slots held gateway-wide now."""
        return int(_HEAD.unpack_from(self._map, 0)[1])

    def publish_queue(self, index: int, waiting: int) -> None:
        """Say how many requests wait in process `index` (one aligned 8-byte write: no lock needed)."""
        _QUEUE.pack_into(self._map, _QUEUES_AT + index * _QUEUE.size, waiting)

    def queued(self, processes: int) -> int:
        """Requests waiting in all processes, as they last said."""
        return sum(_QUEUE.unpack_from(self._map, _QUEUES_AT + i * _QUEUE.size)[0] for i in range(processes))

    def spend_token(self, identity: str, rate_per_s: float, burst: int, now: float) -> float:
        """Spend one of `identity`'s tokens; give the tokens it had (below 1: refused, nothing spent)."""
        key = _key(identity)
        first = key % SLOTS
        with self.locked():
            free = oldest = None
            oldest_at = float("inf")
            for probe in range(PROBES):
                at = _TABLE_AT + ((first + probe) % SLOTS) * _BUCKET.size
                held, tokens, updated = _BUCKET.unpack_from(self._map, at)
                if held == key:
                    tokens = min(float(burst), tokens + max(0.0, now - updated) * rate_per_s)
                    _BUCKET.pack_into(self._map, at, key, tokens - 1.0 if tokens >= 1.0 else tokens, now)
                    return float(tokens)
                if held == 0 and free is None:
                    free = at
                if updated < oldest_at:
                    oldest, oldest_at = at, updated
            chosen = free if free is not None else oldest  # a new identity, or the least recently seen gives way
            assert chosen is not None
            _BUCKET.pack_into(self._map, chosen, key, float(burst) - 1.0, now)
            return float(burst)

    def close(self) -> None:
        """Unmap the block and close the lock."""
        self._map.close()
        os.close(self._lock)
