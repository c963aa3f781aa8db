"""Log folders of `depthserve up` under the temp dir: one per run, the last few kept, a running one never removed."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "depthserve-up-"
KEEP = 5  # finished runs whose logs stay, counting the new one
OWNER = "up.pid"  # the pid of the `depthserve up` writing into the folder


def new_log_dir(root: Path | None = None) -> Path:
    """Make this run's log folder, after removing the oldest finished ones beyond the last KEEP."""
    root = root or Path(tempfile.gettempdir())
    _prune(root, keep=KEEP - 1)
    log_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    (log_dir / OWNER).write_text(str(os.getpid()))
    return log_dir


def _prune(root: Path, keep: int) -> None:
    finished = [
        folder
        for folder in root.glob(f"{PREFIX}*")
        if folder.is_dir() and folder.stat().st_uid == os.getuid() and not _running(folder)
    ]
    finished.sort(key=lambda folder: folder.stat().st_mtime, reverse=True)
    for folder in finished[keep:]:
        shutil.rmtree(folder, ignore_errors=True)


def _running(folder: Path) -> bool:
    """Whether the `depthserve up` that made the folder is still alive (then its logs are in use)."""
    try:
        pid = int((folder / OWNER).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, and someone else's
    return True
