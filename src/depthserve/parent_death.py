"""End with the process that started this one, even when that process is killed outright (Linux).

A launcher that wants this (the test helpers and `depthserve up` do) puts its pid in
DEPTHSERVE_PARENT_PID; the child, first thing at start-up, watches that process and sends itself
SIGTERM (a graceful stop) when it exits. It watches the process through a pidfd, not with
prctl(PR_SET_PDEATHSIG): that signal follows the *thread* that forked, so a worker started from a
thread pool died as soon as the pool's thread ended; and arming anything between fork and exec
(`preexec_fn`) can deadlock a launcher that runs threads.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

PARENT_PID_ENV = "DEPTHSERVE_PARENT_PID"
POLL_S = 1.0  # where pidfds are missing, how often the parent's pid is looked at


def end_with_parent() -> None:
    """Watch the launcher named in the environment; exit now if it is already gone."""
    expected = os.environ.pop(PARENT_PID_ENV, "")  # popped: this process's own children have another parent
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return
    parent = int(expected)
    try:
        handle: int | None = os.pidfd_open(parent)
    except ProcessLookupError:
        handle = None
        gone = True
    except OSError:  # no pidfds (old kernel, seccomp): poll instead
        handle = None
        gone = not _alive(parent)
    else:
        gone = False
    if gone:
        sys.stderr.write(f"depthserve: the process that started it (pid {parent}) has exited; stopping\n")
        raise SystemExit(1)
    threading.Thread(target=_watch, args=(parent, handle), name="parent-watch", daemon=True).start()


def _watch(parent: int, handle: int | None) -> None:
    """Block until the parent exits, then ask this process to stop as if an operator had."""
    if handle is not None:
        select.select([handle], [], [])  # a pidfd turns readable when its process exits
    else:
        while _alive(parent):
            time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
