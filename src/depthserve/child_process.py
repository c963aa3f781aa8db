"""Children that cannot outlive the process that started them, even when it is killed outright."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def end_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (call in the child, before exec)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
