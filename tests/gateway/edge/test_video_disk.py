"""The video disk budget: bytes held by uploads against the limit, refusals with a reason, dead gateways' leftovers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from depthserve.gateway.edge.video_disk import VideoDisk
from depthserve.gateway.errors import GatewayError


def test_leases_hold_bytes_until_released_and_an_upload_past_the_limit_is_refused(tmp_path: Path) -> None:
    disk = VideoDisk(1000, tmp_path)
    first, second = disk.lease(), disk.lease()
    first.cover(600)
    first.cover(400)  # covering less than held takes nothing more
    with pytest.raises(GatewayError) as refused:
        second.cover(500)
    assert (refused.value.status, refused.value.reason) == (503, "video_disk_full")
    assert refused.value.retry_after is not None and disk.refused == 1 and second.held == 0
    first.trim(300)  # declared 600, wrote 300
    second.cover(700)
    assert disk.used == 1000
    first.release()
    second.release()
    assert disk.used == 0 and disk.describe()["disk_mib"] == 0


async def test_folders_are_private_and_a_dead_gateways_folders_are_swept(tmp_path: Path) -> None:
    disk = VideoDisk(1000, tmp_path)
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = disk.base / f"{int(dead_pid.stdout)}-abc"
    leftover.mkdir(parents=True)
    (leftover / "video").write_bytes(b"x" * 10)
    folder = await disk.folder()
    assert folder.parent == disk.base and folder.name.split("-")[0].isdigit()
    assert not leftover.exists() and (folder.stat().st_mode & 0o777) == 0o700
