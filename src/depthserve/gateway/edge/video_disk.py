"""Video uploads on this gateway's disk: where they go, and how many bytes all of them may hold at once.

Videos are read to disk, not memory, but a disk fills too: requests and queued video jobs together
hold at most `video_max_disk_mb`; an upload that would pass it is refused `503 video_disk_full`
(before its body is read when it declares its length). Each upload's folder is named after this
process (`BASE/PID-RANDOM`, BASE being `video_spool_dir` or the temp folder), so the folders a
gateway that died left behind are removed the first time the next one on the same base needs one.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from depthserve.gateway.errors import GatewayError
from depthserve.jobs.spool import remove_stale

RETRY_AFTER_S = 10.0  # uploads free their bytes when their video ends
_MIB = 1024 * 1024


def _new_folder(base: Path, sweep: bool) -> Path:
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if sweep:
        remove_stale(base)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))


class VideoDisk:
    """Counts the bytes of video uploads on disk against a limit, and makes their folders."""

    def __init__(self, limit_bytes: int, spool_dir: Path | None = None) -> None:
        self.limit = limit_bytes
        self.base = (spool_dir or Path(tempfile.gettempdir())) / f"depthserve-video-{os.getuid()}"
        self.used = 0
        self.refused = 0
        self._swept = False

    def describe(self) -> dict[str, float | int]:
        """MiB held and the limit, and uploads refused, for /v1/cluster."""
        return {
            "disk_mib": round(self.used / _MIB, 1),
            "disk_limit_mib": round(self.limit / _MIB),
            "disk_refused": self.refused,
        }

    async def folder(self) -> Path:
        """A new private folder for one upload (the first call also removes dead gateways' leftovers)."""
        sweep, self._swept = not self._swept, True
        return await asyncio.to_thread(_new_folder, self.base, sweep)

    def lease(self) -> DiskLease:
        """Start counting one upload's bytes."""
        return DiskLease(self)


class DiskLease:
    """The bytes one upload holds on disk; `release` gives them back when its folder is removed."""

    def __init__(self, disk: VideoDisk) -> None:
        self._disk = disk
        self.held = 0

    def cover(self, size: int) -> None:
        """Hold at least `size` bytes; 503 video_disk_full if the disk budget has not that much left."""
        more = size - self.held
        if more <= 0:
            return
        disk = self._disk
        if disk.used + more > disk.limit:
            disk.refused += 1
            raise GatewayError(
                503,
                "video_disk_full",
                f"video uploads on this gateway hold {disk.used / _MIB:.0f} of {disk.limit / _MIB:.0f} MiB "
                "(video_max_disk_mb); retry later",
                retry_after=RETRY_AFTER_S,
            )
        disk.used += more
        self.held = size

    def trim(self, size: int) -> None:
        """Hold only `size` bytes (the upload turned out smaller than declared)."""
        if size < self.held:
            self._disk.used -= self.held - size
            self.held = size

    def release(self) -> None:
        """Give every byte back (the upload's folder is gone)."""
        self._disk.used -= self.held
        self.held = 0
