"""End with the process that started this one, even when that process is killed outright (Linux).

A launcher that wants this (the test helpers do) puts its pid in DEPTHSERVE_PARENT_PID; the child,
first thing at start-up, asks the kernel for SIGTERM when its parent dies. Arming it in the child
after exec, not in a `preexec_fn` between fork and exec, is what keeps it safe in a launcher that
runs threads (gRPC's): code between fork and exec can deadlock on a lock another thread held.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "DEPTHSERVE_PARENT_PID"
PR_SET_PDEATHSIG = 1


def end_with_parent() -> None:
    """Arm the parent-death signal if the launcher asked for it; exit now if that parent is already gone."""
    expected = os.environ.pop(PARENT_PID_ENV, "")  # popped: this process's own children have another parent
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not permitted here: carry on unprotected rather than refuse to run
    parent = int(expected)
    # Armed only from now: a parent that died before is seen as re-parenting (to init or a subreaper).
    # A launcher between us (`sudo ...`) is a different parent while ours lives: the signal then follows it.
    if os.getppid() != parent and not _alive(parent):
        sys.stderr.write(f"depthserve: the process that started it (pid {parent}) has exited; stopping\n")
        raise SystemExit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
